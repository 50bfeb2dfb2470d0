package trusted

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// smtpSink is an in-process SMTP server that speaks just enough SMTP for
// net/smtp (EHLO, STARTTLS, AUTH PLAIN, MAIL, RCPT, DATA, RSET, NOOP, QUIT)
// and keeps what it receives.
type smtpSink struct {
	TLS        *tls.Config     // offer STARTTLS with this
	User, Pass string          // offer AUTH PLAIN and require it
	Refuse     map[string]bool // recipients answered with 550
	Hang       string          // "greeting" or "data": go silent there

	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	msgs  []sinkMessage
	dials int
}

type sinkMessage struct {
	From   string
	Rcpts  []string
	Data   string
	TLS    bool
	Authed string
}

func startSink(t *testing.T, s *smtpSink) *smtpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.dials++
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *smtpSink) Addr() string { return s.ln.Addr().String() }

func (s *smtpSink) Messages() []sinkMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkMessage(nil), s.msgs...)
}

func (s *smtpSink) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}

func (s *smtpSink) serve(c net.Conn) {
	if s.Hang == "greeting" {
		io.Copy(io.Discard, c) // until the client gives up
		return
	}
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	reply := func(lines ...string) {
		for _, l := range lines {
			w.WriteString(l + "\r\n")
		}
		w.Flush()
	}
	reply("220 sink ESMTP ready")
	var m sinkMessage
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			lines := []string{"250-sink greets " + arg, "250-8BITMIME"}
			if s.TLS != nil && !m.TLS {
				lines = append(lines, "250-STARTTLS")
			}
			if s.User != "" {
				lines = append(lines, "250-AUTH PLAIN")
			}
			reply(append(lines, "250 HELP")...)
		case "STARTTLS":
			reply("220 go ahead")
			tc := tls.Server(c, s.TLS)
			if tc.Handshake() != nil {
				return
			}
			c, r, w = tc, bufio.NewReader(tc), bufio.NewWriter(tc)
			m = sinkMessage{TLS: true}
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			dec, _ := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(dec), "\x00")
			if strings.ToUpper(mech) == "PLAIN" && len(parts) == 3 && parts[1] == s.User && parts[2] == s.Pass {
				m.Authed = parts[1]
				reply("235 2.7.0 authenticated")
			} else {
				reply("535 5.7.8 bad credentials")
			}
		case "MAIL":
			if s.User != "" && m.Authed == "" {
				reply("530 5.7.0 authentication required")
				continue
			}
			m.From = angle(arg)
			reply("250 OK")
		case "RCPT":
			to := angle(arg)
			if s.Refuse[to] {
				reply("550 5.1.1 no such user here")
				continue
			}
			m.Rcpts = append(m.Rcpts, to)
			reply("250 OK")
		case "DATA":
			reply("354 end with <CRLF>.<CRLF>")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(strings.TrimPrefix(l, "."))
			}
			if s.Hang == "data" {
				io.Copy(io.Discard, r)
				return
			}
			m.Data = data.String()
			s.mu.Lock()
			s.msgs = append(s.msgs, m)
			s.mu.Unlock()
			m = sinkMessage{TLS: m.TLS, Authed: m.Authed}
			reply("250 2.0.0 queued")
		case "RSET":
			m = sinkMessage{TLS: m.TLS, Authed: m.Authed}
			reply("250 OK")
		case "NOOP":
			reply("250 OK")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 5.5.2 command not recognized")
		}
	}
}

// angle returns the address in "FROM:<a@b> BODY=8BITMIME".
func angle(arg string) string {
	_, rest, _ := strings.Cut(arg, "<")
	addr, _, _ := strings.Cut(rest, ">")
	return addr
}

// selfSigned returns a server config with a certificate for 127.0.0.1 and
// a client config that trusts it.
func selfSigned(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sink"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true,

		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	return server, &tls.Config{RootCAs: pool}
}
