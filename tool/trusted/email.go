package trusted

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

// EmailConfig configures send_email.
type EmailConfig struct {
	// Addr is the SMTP server, host:port. The connection is upgraded with
	// STARTTLS whenever the server offers it.
	Addr string
	// From is the sender, "Name <addr@example.com>" or a bare address.
	From string
	// Username and Password, if set, log in with AUTH PLAIN, which net/smtp
	// allows only over TLS or to localhost. They stay on the trusted side.
	Username string
	Password string
	// AllowedRecipients are patterns every To and Cc address must match:
	// "*@example.com", "alice@example.org", or a bare domain "example.com"
	// (the same as "*@example.com"); '*' stands for any characters, case is
	// ignored. Empty allows any recipient.
	AllowedRecipients []string
	// Timeout bounds one send, from dial to the server's answer to the
	// message (default 30s).
	Timeout time.Duration
	// TLS configures STARTTLS (e.g. RootCAs for a private CA). ServerName
	// defaults to Addr's host.
	TLS *tls.Config
	// LocalName is the name given in EHLO (default "localhost").
	LocalName string
	// MaxBodyBytes bounds the body (default 256 KiB).
	MaxBodyBytes int
}

const (
	defaultMaxBodyBytes = 256 << 10
	maxRecipients       = 50
	maxSubjectChars     = 400
)

// Email is the send_email tool.
type Email struct {
	cfg   EmailConfig
	host  string
	from  *mail.Address
	allow []string
}

var _ tool.Tool = (*Email)(nil)

// NewEmail checks cfg and returns the tool. It does not connect.
func NewEmail(cfg EmailConfig) (*Email, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.LocalName == "" {
		cfg.LocalName = "localhost"
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = defaultMaxBodyBytes
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("send_email: SMTP address %q must be host:port: %w", cfg.Addr, errdefs.ErrInvalidArgument)
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("send_email: From %q: %v: %w", cfg.From, err, errdefs.ErrInvalidArgument)
	}
	e := &Email{cfg: cfg, host: host, from: from}
	for _, p := range cfg.AllowedRecipients {
		p = strings.ToLower(strings.TrimSpace(p))
		if p == "" {
			continue
		}
		if !strings.Contains(p, "@") {
			p = "*@" + p
		}
		e.allow = append(e.allow, p)
	}
	return e, nil
}

// Spec implements tool.Tool.
func (e *Email) Spec() tool.Spec {
	return tool.Spec{
		Name:        "send_email",
		Description: e.description(),
		InputSchema: emailSchema,
		Side:        tool.SideTrusted,
		Labels:      []string{tool.LabelExfiltrationSink},
	}
}

var emailSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"to":{"type":"array","items":{"type":"string"},"minItems":1,"description":"Recipient addresses."},` +
	`"cc":{"type":"array","items":{"type":"string"},"description":"Copy addresses."},` +
	`"subject":{"type":"string","description":"One line."},` +
	`"body":{"type":"string","description":"Plain text."}},` +
	`"required":["to","subject","body"],"additionalProperties":false}`)

func (e *Email) description() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Send a plain-text email from %s. ", e.from.String())
	if len(e.allow) > 0 {
		fmt.Fprintf(&b, "Recipients (to and cc) must match: %s. ", strings.Join(e.allow, ", "))
	}
	fmt.Fprintf(&b, "At most %d recipients; subject is one line of at most %d characters; body at most %d KiB. ",
		maxRecipients, maxSubjectChars, e.cfg.MaxBodyBytes>>10)
	b.WriteString("The email is sent at once and cannot be recalled; a refused recipient means nothing was sent.")
	return b.String()
}

type emailInput struct {
	To      []string `json:"to"`
	Cc      []string `json:"cc"`
	Subject string   `json:"subject"`
	Body    string   `json:"body"`
}

// Call implements tool.Tool. The Message-ID is derived from key, so a
// repeated call carries the same Message-ID and a receiver can drop the
// copy.
func (e *Email) Call(ctx context.Context, key string, input json.RawMessage) (tool.Result, error) {
	var in emailInput
	if err := decodeInput("send_email", input, &in); err != nil {
		return tool.Result{}, err
	}
	to, cc, err := e.recipients(in)
	if err != nil {
		return tool.Result{}, err
	}
	subject := strings.Join(strings.Fields(in.Subject), " ")
	switch {
	case subject == "":
		return tool.Result{}, invalidf("send_email: subject is required")
	case utf8.RuneCountInString(subject) > maxSubjectChars:
		return tool.Result{}, invalidf("send_email: subject is %d characters; the limit is %d", utf8.RuneCountInString(subject), maxSubjectChars)
	case strings.TrimSpace(in.Body) == "":
		return tool.Result{}, invalidf("send_email: body is required")
	case len(in.Body) > e.cfg.MaxBodyBytes:
		return tool.Result{}, invalidf("send_email: body is %d bytes; the limit is %d", len(in.Body), e.cfg.MaxBodyBytes)
	case !utf8.ValidString(in.Body):
		return tool.Result{}, invalidf("send_email: body is not valid UTF-8 text")
	}
	msgID := e.messageID(key)
	msg := e.message(to, cc, subject, in.Body, msgID)
	rcpts := append(append([]*mail.Address{}, to...), cc...)
	if res, err := e.send(ctx, rcpts, msg); err != nil || res.IsError {
		return res, err
	}
	text := "Sent to " + addrList(to)
	if len(cc) > 0 {
		text += " (cc " + addrList(cc) + ")"
	}
	return tool.Result{Text: fmt.Sprintf("%s from %s, subject %q. Message-ID: %s", text, e.from.Address, subject, msgID)}, nil
}

// recipients parses, deduplicates and checks the addresses of in.
func (e *Email) recipients(in emailInput) (to, cc []*mail.Address, err error) {
	if len(in.To) == 0 {
		return nil, nil, invalidf("send_email: to is required: at least one address")
	}
	if len(in.To)+len(in.Cc) > maxRecipients {
		return nil, nil, invalidf("send_email: %d recipients; the limit is %d", len(in.To)+len(in.Cc), maxRecipients)
	}
	seen := map[string]bool{}
	parse := func(field string, list []string) ([]*mail.Address, error) {
		var out []*mail.Address
		for i, s := range list {
			a, err := mail.ParseAddress(s)
			if err != nil {
				return nil, invalidf("send_email: %s[%d] %q is not an email address (%v)", field, i, s, err)
			}
			lower := strings.ToLower(a.Address)
			if !e.allowed(lower) {
				return nil, deniedf("send_email: recipient %s is not allowed by configuration; allowed: %s. Nothing was sent.",
					a.Address, strings.Join(e.allow, ", "))
			}
			if !seen[lower] {
				seen[lower] = true
				out = append(out, a)
			}
		}
		return out, nil
	}
	if to, err = parse("to", in.To); err != nil {
		return nil, nil, err
	}
	if cc, err = parse("cc", in.Cc); err != nil {
		return nil, nil, err
	}
	return to, cc, nil
}

func (e *Email) allowed(addr string) bool {
	if len(e.allow) == 0 {
		return true
	}
	for _, p := range e.allow {
		if globMatch(p, addr) {
			return true
		}
	}
	return false
}

func (e *Email) messageID(key string) string {
	var id string
	if key != "" {
		sum := sha256.Sum256([]byte("reins send_email\x00" + key))
		id = hex.EncodeToString(sum[:16])
	} else {
		id = strings.ToLower(rand.Text())
	}
	domain := e.from.Address[strings.LastIndexByte(e.from.Address, '@')+1:]
	return "<" + id + "@" + domain + ">"
}

// message renders the email: plain text, UTF-8, quoted-printable.
func (e *Email) message(to, cc []*mail.Address, subject, body, msgID string) []byte {
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", e.from.String())
	h("To", addrHeader(to))
	if len(cc) > 0 {
		h("Cc", addrHeader(cc))
	}
	h("Subject", mime.QEncoding.Encode("utf-8", subject))
	h("Date", time.Now().Format(time.RFC1123Z))
	h("Message-ID", msgID)
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	// RFC 3834: keeps vacation responders from answering a machine.
	h("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	qp.Write([]byte(strings.ReplaceAll(body, "\r\n", "\n")))
	qp.Close()
	return b.Bytes()
}

func addrHeader(list []*mail.Address) string {
	s := make([]string, len(list))
	for i, a := range list {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func addrList(list []*mail.Address) string {
	s := make([]string, len(list))
	for i, a := range list {
		s[i] = a.Address
	}
	return strings.Join(s, ", ")
}

// send speaks SMTP to the server. A recipient or message the server refuses
// is a Result with IsError; a server that cannot be reached, or that stops
// answering, is an error.
func (e *Email) send(ctx context.Context, rcpts []*mail.Address, msg []byte) (tool.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", e.cfg.Addr)
	if err != nil {
		return e.netFailure(ctx, "connecting", err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	// Cancelling ctx unblocks whatever read or write is under way.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	phase := "greeting"
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		return e.smtpFailure(ctx, phase, err)
	}
	defer c.Close()
	phase = "EHLO"
	if err := c.Hello(e.cfg.LocalName); err != nil {
		return e.smtpFailure(ctx, phase, err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		phase = "STARTTLS"
		tc := &tls.Config{}
		if e.cfg.TLS != nil {
			tc = e.cfg.TLS.Clone()
		}
		if tc.ServerName == "" {
			tc.ServerName = e.host
		}
		if err := c.StartTLS(tc); err != nil {
			return e.smtpFailure(ctx, phase, err)
		}
	}
	if e.cfg.Username != "" {
		phase = "AUTH"
		if ok, _ := c.Extension("AUTH"); !ok {
			return tool.Result{}, kindf(errdefs.ErrFailedPrecondition, "send_email: the mail server at %s does not offer AUTH but a username is configured; "+
				"nothing was sent, and a person must fix the email configuration", e.cfg.Addr)
		}
		if err := c.Auth(smtp.PlainAuth("", e.cfg.Username, e.cfg.Password, e.host)); err != nil {
			var tpErr *textproto.Error
			var ne net.Error
			if errors.As(err, &tpErr) || errors.As(err, &ne) || ctx.Err() != nil {
				return e.smtpFailure(ctx, phase, err)
			}
			// net/smtp refuses to send a password in clear to a remote host.
			return tool.Result{}, kindf(errdefs.ErrFailedPrecondition, "send_email: cannot log in to the mail server at %s: %v (the password is sent only over TLS or to localhost); "+
				"nothing was sent, and a person must fix the email configuration", e.cfg.Addr, err)
		}
	}
	phase = "MAIL FROM"
	if err := c.Mail(e.from.Address); err != nil {
		return e.smtpFailure(ctx, phase, err)
	}
	for _, r := range rcpts {
		if err := c.Rcpt(r.Address); err != nil {
			var tpErr *textproto.Error
			if errors.As(err, &tpErr) {
				return tool.Result{IsError: true, Text: fmt.Sprintf("The mail server refused recipient %s: %d %s. Nothing was sent.",
					r.Address, tpErr.Code, tpErr.Msg)}, nil
			}
			return e.smtpFailure(ctx, "RCPT TO", err)
		}
	}
	phase = "DATA"
	w, err := c.Data()
	if err != nil {
		return e.smtpFailure(ctx, phase, err)
	}
	if _, err := w.Write(msg); err != nil {
		return e.smtpFailure(ctx, phase, err)
	}
	// Close sends the final "." and waits for the server's verdict: from
	// here on, a silence leaves the outcome unknown.
	if err := w.Close(); err != nil {
		return e.smtpFailure(ctx, "end of DATA", err)
	}
	c.Quit() // the message is accepted; a failed QUIT changes nothing
	return tool.Result{}, nil
}

// smtpFailure explains err, which happened during phase.
func (e *Email) smtpFailure(ctx context.Context, phase string, err error) (tool.Result, error) {
	var tpErr *textproto.Error
	if errors.As(err, &tpErr) {
		switch phase {
		case "AUTH":
			return tool.Result{}, kindf(errdefs.ErrUnauthenticated, "send_email: the mail server at %s refused the configured credentials (%d %s); "+
				"nothing was sent, and a person must fix the email configuration", e.cfg.Addr, tpErr.Code, tpErr.Msg)
		case "end of DATA", "DATA":
			return tool.Result{IsError: true, Text: fmt.Sprintf("The mail server refused the message: %d %s. Nothing was sent.", tpErr.Code, tpErr.Msg)}, nil
		}
		return tool.Result{IsError: true, Text: fmt.Sprintf("The mail server answered %s with %d %s. Nothing was sent.", phase, tpErr.Code, tpErr.Msg)}, nil
	}
	return e.netFailure(ctx, phase, err)
}

// netFailure explains a connection that failed or went silent.
func (e *Email) netFailure(ctx context.Context, phase string, err error) (tool.Result, error) {
	outcome := "nothing was sent"
	if phase == "end of DATA" {
		outcome = "the message may or may not have been sent; check before sending it again"
	}
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return tool.Result{}, kindf(errdefs.ErrCanceled, "send_email: cancelled during %s; %s", phase, outcome)
	case ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return tool.Result{}, kindf(errdefs.ErrTimeout, "send_email: the mail server at %s did not answer within %s (at %s); %s", e.cfg.Addr, e.cfg.Timeout, phase, outcome)
	}
	return tool.Result{}, kindf(errdefs.ErrUnavailable, "send_email: mail server at %s, %s: %v; %s", e.cfg.Addr, phase, err, outcome)
}
