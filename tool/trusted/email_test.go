package trusted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

func newEmailTool(t *testing.T, cfg EmailConfig) *Email {
	t.Helper()
	if cfg.From == "" {
		cfg.From = "Reins Bot <bot@example.com>"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	e, err := NewEmail(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEmailSpec(t *testing.T) {
	e := newEmailTool(t, EmailConfig{Addr: "127.0.0.1:25", AllowedRecipients: []string{"*@example.com", "partner.org"}})
	spec := e.Spec()
	if spec.Name != "send_email" || spec.Side != tool.SideTrusted || !spec.HasLabel(tool.LabelExfiltrationSink) {
		t.Errorf("spec = %+v", spec)
	}
	for _, want := range []string{"bot@example.com", "*@example.com, *@partner.org", "50 recipients", "cannot be recalled"} {
		if !strings.Contains(spec.Description, want) {
			t.Errorf("description lacks %q: %s", want, spec.Description)
		}
	}
	checkSchema(t, spec.InputSchema, "to", "subject", "body")
}

// readMessage parses what the sink received and decodes the body.
func readMessage(t *testing.T, data string) (*mail.Message, string) {
	t.Helper()
	msg, err := mail.ReadMessage(strings.NewReader(data))
	if err != nil {
		t.Fatalf("received message does not parse: %v\n%s", err, data)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	return msg, string(body)
}

func TestEmailSend(t *testing.T) {
	sink := startSink(t, &smtpSink{})
	e := newEmailTool(t, EmailConfig{Addr: sink.Addr(), AllowedRecipients: []string{"*@example.com"}})
	body := "Hello Ann,\n\nthe report is ready. Ünïcode and a long line: " + strings.Repeat("x", 120) + "\n.\n..leading dots\n"
	input, _ := json.Marshal(map[string]any{
		"to":      []string{"Ann <ann@example.com>", "bob@EXAMPLE.com", "ann@example.com"},
		"cc":      []string{"carol@example.com"},
		"subject": "Report — Q3\r\nBcc: mallory@evil.org",
		"body":    body,
	})
	res, err := e.Call(context.Background(), "run1/4/0", input)
	if err != nil || res.IsError {
		t.Fatalf("Call = %+v, %v", res, err)
	}
	msgs := sink.Messages()
	if len(msgs) != 1 {
		t.Fatalf("sink got %d messages", len(msgs))
	}
	m := msgs[0]
	if m.From != "bot@example.com" || strings.Join(m.Rcpts, ",") != "ann@example.com,bob@EXAMPLE.com,carol@example.com" {
		t.Errorf("envelope: from %q to %q", m.From, m.Rcpts)
	}
	msg, got := readMessage(t, m.Data)
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders := map[string]string{
		"From":           `"Reins Bot" <bot@example.com>`,
		"To":             `"Ann" <ann@example.com>, <bob@EXAMPLE.com>`,
		"Cc":             "<carol@example.com>",
		"Content-Type":   "text/plain; charset=utf-8",
		"Auto-Submitted": "auto-generated",
		"Bcc":            "",
	}
	for k, v := range wantHeaders {
		if g := msg.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if subject != "Report — Q3 Bcc: mallory@evil.org" {
		t.Errorf("subject = %q", subject)
	}
	if _, err := msg.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	if got != strings.ReplaceAll(body, "\n", "\r\n") {
		t.Errorf("body = %q\nwant %q", got, body)
	}
	id := msg.Header.Get("Message-Id")
	if !strings.HasSuffix(id, "@example.com>") || !strings.Contains(res.Text, id) {
		t.Errorf("Message-ID %q, result %q", id, res.Text)
	}
	if !strings.Contains(res.Text, "Sent to ann@example.com, bob@EXAMPLE.com (cc carol@example.com)") {
		t.Errorf("result = %q", res.Text)
	}

	// The same key gives the same Message-ID, so a receiver can drop a
	// repeat; another key another one.
	input, _ = json.Marshal(map[string]any{"to": []string{"ann@example.com"}, "subject": "s", "body": "b"})
	for _, key := range []string{"run1/4/0", "run1/5/0"} {
		if _, err := e.Call(context.Background(), key, input); err != nil {
			t.Fatal(err)
		}
	}
	msgs = sink.Messages()
	id1, _ := readMessage(t, msgs[1].Data)
	id2, _ := readMessage(t, msgs[2].Data)
	if id1.Header.Get("Message-Id") != id || id2.Header.Get("Message-Id") == id {
		t.Errorf("Message-IDs %q %q %q", id, id1.Header.Get("Message-Id"), id2.Header.Get("Message-Id"))
	}
}

func TestEmailStartTLSAuth(t *testing.T) {
	serverTLS, clientTLS := selfSigned(t)
	sink := startSink(t, &smtpSink{TLS: serverTLS, User: "bot", Pass: "s3cret"})
	e := newEmailTool(t, EmailConfig{Addr: sink.Addr(), Username: "bot", Password: "s3cret", TLS: clientTLS})
	res, err := call(t, e, `{"to":["ann@example.com"],"subject":"hi","body":"over TLS"}`)
	if err != nil || res.IsError {
		t.Fatalf("Call = %+v, %v", res, err)
	}
	m := sink.Messages()[0]
	if !m.TLS || m.Authed != "bot" {
		t.Errorf("TLS %v, authed %q", m.TLS, m.Authed)
	}
	if strings.Contains(res.Text, "s3cret") {
		t.Errorf("result shows the password: %s", res.Text)
	}

	wrong := newEmailTool(t, EmailConfig{Addr: sink.Addr(), Username: "bot", Password: "nope", TLS: clientTLS})
	_, err = call(t, wrong, `{"to":["ann@example.com"],"subject":"hi","body":"x"}`)
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "refused the configured credentials") || strings.Contains(err.Error(), "nope") {
		t.Errorf("wrong password: err = %v", err)
	}

	// A certificate the client does not trust stops the send.
	untrusted := newEmailTool(t, EmailConfig{Addr: sink.Addr(), Username: "bot", Password: "s3cret"})
	_, err = call(t, untrusted, `{"to":["ann@example.com"],"subject":"hi","body":"x"}`)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("untrusted certificate: err = %v", err)
	}
	if len(sink.Messages()) != 1 {
		t.Errorf("sink has %d messages", len(sink.Messages()))
	}
}

func TestEmailRefusals(t *testing.T) {
	sink := startSink(t, &smtpSink{Refuse: map[string]bool{"gone@example.com": true}})
	e := newEmailTool(t, EmailConfig{Addr: sink.Addr(), AllowedRecipients: []string{"*@example.com"}})

	res, err := call(t, e, `{"to":["ann@example.com","gone@example.com"],"subject":"s","body":"b"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text, "refused recipient gone@example.com: 550 5.1.1 no such user here. Nothing was sent.") {
		t.Errorf("server refusal: %+v, %v", res, err)
	}
	dials := sink.Dials()
	_, err = call(t, e, `{"to":["ann@example.com"],"cc":["eve@evil.org"],"subject":"s","body":"b"}`)
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "eve@evil.org is not allowed by configuration; allowed: *@example.com") {
		t.Errorf("config refusal: err = %v", err)
	}
	if sink.Dials() != dials {
		t.Error("a refused recipient still made a connection")
	}
	if n := len(sink.Messages()); n != 0 {
		t.Errorf("sink got %d messages", n)
	}
}

func TestEmailServerTrouble(t *testing.T) {
	for _, hang := range []string{"greeting", "data"} {
		t.Run("hangs at "+hang, func(t *testing.T) {
			sink := startSink(t, &smtpSink{Hang: hang})
			e := newEmailTool(t, EmailConfig{Addr: sink.Addr(), Timeout: 300 * time.Millisecond})
			start := time.Now()
			_, err := call(t, e, `{"to":["ann@example.com"],"subject":"s","body":"b"}`)
			if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "did not answer within 300ms") {
				t.Errorf("err = %v", err)
			}
			want := "nothing was sent"
			if hang == "data" {
				want = "may or may not have been sent"
			}
			if err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want %q", err, want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		sink := startSink(t, &smtpSink{Hang: "greeting"})
		e := newEmailTool(t, EmailConfig{Addr: sink.Addr()})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := e.Call(ctx, "k", json.RawMessage(`{"to":["ann@example.com"],"subject":"s","body":"b"}`))
		if !errors.Is(err, errdefs.ErrTimeout) && !errors.Is(err, errdefs.ErrCanceled) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		e := newEmailTool(t, EmailConfig{Addr: addr})
		_, err = call(t, e, `{"to":["ann@example.com"],"subject":"s","body":"b"}`)
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was sent") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestEmailBadInput(t *testing.T) {
	e := newEmailTool(t, EmailConfig{Addr: "127.0.0.1:1"})
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf("u%d@example.com", i)
	}
	manyJSON, _ := json.Marshal(map[string]any{"to": many, "subject": "s", "body": "b"})
	tests := []struct{ input, want string }{
		{`{"subject":"s","body":"b"}`, "to is required"},
		{`{"to":[],"subject":"s","body":"b"}`, "to is required"},
		{`{"to":"ann@example.com","subject":"s","body":"b"}`, `field "to" must be an array, not string`},
		{`{"to":["not an address"],"subject":"s","body":"b"}`, `to[0] "not an address" is not an email address`},
		{`{"to":["a@example.com"],"cc":["@x"],"subject":"s","body":"b"}`, `cc[0] "@x" is not an email address`},
		{`{"to":["a@example.com"],"body":"b"}`, "subject is required"},
		{`{"to":["a@example.com"],"subject":" \n ","body":"b"}`, "subject is required"},
		{`{"to":["a@example.com"],"subject":"s"}`, "body is required"},
		{`{"to":["a@example.com"],"subject":"s","body":"b","bcc":["x@y.z"]}`, `unknown field "bcc"`},
		{`{"to":["a@example.com"],"subject":` + fmt.Sprintf("%q", strings.Repeat("s", 401)) + `,"body":"b"}`, "subject is 401 characters; the limit is 400"},
		{string(manyJSON), "51 recipients; the limit is 50"},
	}
	for _, tt := range tests {
		_, err := call(t, e, tt.input)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.input, err, tt.want)
		}
	}
}

func TestNewEmailErrors(t *testing.T) {
	for _, cfg := range []EmailConfig{
		{Addr: "no-port", From: "bot@example.com"},
		{Addr: "127.0.0.1:25", From: "not an address"},
	} {
		if _, err := NewEmail(cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewEmail(%+v) = %v", cfg, err)
		}
	}
}
