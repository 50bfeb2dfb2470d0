package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

// ReleaseHost asks the executor to let go of its host socket and every
// connection on it, before a memory checkpoint (executor.HostListener),
// and returns once it has: the executor closes the call's own connection
// last. The executor listens again when the sandbox's backend signals it
// after the restore (or after a checkpoint that failed), or by itself
// after executor.RelistenAfter. This client's pooled connections are
// closed too: its next call dials afresh.
func (c *Client) ReleaseHost(ctx context.Context) error {
	return c.checkpointCall(ctx, executor.CheckpointReleasePath, "", "release")
}

// Rekey switches the token the executor accepts to newToken; this client
// keeps the old one, so dial a new client with newToken afterwards.
func (c *Client) Rekey(ctx context.Context, newToken string) error {
	if newToken == "" || strings.ContainsAny(newToken, "\r\n") {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "client: the new executor token is empty or holds a line break")
	}
	return c.checkpointCall(ctx, executor.CheckpointRekeyPath, executor.NewTokenHeader+": "+newToken+"\r\n", "rekey")
}

// checkpointCall makes one of the executor's checkpoint calls and reads
// its connection to the end (bounded), which is the executor's word that
// it is done.
func (c *Client) checkpointCall(ctx context.Context, path, extra, what string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	conn, err := c.dialUpgradeWith(ctx, http.MethodPost, path, executor.CheckpointUpgrade, what, extra)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	} else {
		conn.SetReadDeadline(time.Now().Add(c.timeout))
	}
	// Nothing follows the answer: a sandbox that sends bytes here is not
	// our executor, and is read no further than a few.
	n, err := io.Copy(io.Discard, io.LimitReader(conn, 1<<10))
	if err != nil || n > 0 {
		return errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor did not close the "+what+" call's connection as it should")
	}
	if what == "release" {
		c.tr.CloseIdleConnections()
		c.bulkTr.CloseIdleConnections()
	}
	return nil
}
