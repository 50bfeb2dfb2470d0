package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

// DialPort opens a TCP connection to port on the sandbox's own loopback,
// through the executor (executor.PortPath): a fresh connection to its
// socket, upgraded, then the stream's bytes as they are. ctx bounds the
// handshake only. Errors say what happened in words fit for the sandbox's
// owner (never the socket's path): nothing listening is
// errdefs.ErrUnavailable with "nothing listens on port N in the sandbox".
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("port %d is outside 1-65535", port))
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.dialUpgrade(ctx, "GET", executor.PortPath+strconv.Itoa(port), executor.PortUpgrade, "port")
}

// dialUpgrade opens a fresh connection to the executor and upgrades it
// (see upgradeWith); ctx bounds the handshake only.
func (c *Client) dialUpgrade(ctx context.Context, method, path, proto, what string) (net.Conn, error) {
	return c.dialUpgradeWith(ctx, method, path, proto, what, "")
}

// dialUpgradeWith is dialUpgrade with extra header lines ("K: V\r\n"…).
func (c *Client) dialUpgradeWith(ctx context.Context, method, path, proto, what, extra string) (net.Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor cannot be reached")
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	rc, err := c.upgradeWith(conn, method, path, proto, what, extra)
	if !stop() || err != nil {
		conn.Close()
		if err == nil || ctx.Err() != nil {
			if cause := context.Cause(ctx); errdefs.Kind(cause) != nil {
				return nil, cause
			}
			return nil, ctx.Err()
		}
		return nil, err
	}
	return rc, nil
}

// maxAnswerHead bounds the status line and headers of the answer to an
// upgrade request.
const maxAnswerHead = 16 << 10

// upgradeWith sends an upgrade request (method path, Upgrade: proto, and
// the extra header lines) on conn and reads the answer; what names the
// request in errors ("port").
func (c *Client) upgradeWith(conn net.Conn, method, path, proto, what, extra string) (net.Conn, error) {
	req := method + " " + path + " HTTP/1.1\r\nHost: executor\r\n" +
		"Authorization: Bearer " + c.token + "\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n" + extra + "\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor closed the connection")
	}
	// The answer's head is bounded: the socket sits where the sandbox
	// writes, and what answers there may be the sandbox's, not the
	// executor (an endless header must not grow the service).
	br := bufio.NewReaderSize(&io.LimitedReader{R: conn, N: maxAnswerHead}, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor did not answer the "+what+" request")
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if br.Buffered() == 0 {
			return conn, nil // nothing read ahead: the bare conn, which can splice
		}
		return &readAhead{Conn: conn, r: io.MultiReader(io.LimitReader(br, int64(br.Buffered())), conn)}, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	resp.Body.Close()
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = "the sandbox's executor refused the " + what + " connection: " + resp.Status
	}
	kind := errdefs.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusBadRequest:
		kind = errdefs.ErrInvalidArgument
	case http.StatusUnauthorized:
		kind = errdefs.ErrUnauthenticated
	case http.StatusNotFound:
		// An executor older than ports.
		kind, msg = errdefs.ErrUnimplemented, "the sandbox's executor is too old for "+what+" connections: recreate the sandbox"
	case http.StatusConflict:
		kind = errdefs.ErrFailedPrecondition
	case http.StatusServiceUnavailable:
		kind = errdefs.ErrResourceExhausted
	}
	return nil, errdefs.WithMessage(kind, msg)
}

// readAhead is a connection whose first bytes were read with the answer.
type readAhead struct {
	net.Conn
	r io.Reader
}

func (c *readAhead) Read(p []byte) (int, error) { return c.r.Read(p) }
