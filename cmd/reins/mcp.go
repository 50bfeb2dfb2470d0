package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/server/mcp"
)

func mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve reins sandboxes as MCP tools over stdio (for Claude Code, Cursor, any MCP client)",
		Long: `Serve reins sandboxes as the tools of a Model Context Protocol server on
stdin and stdout, for an MCP client that starts it: create, exec, read, write
and edit files, list, grep, upload and download between this machine and a
sandbox, port URLs, delete. It calls reins serve at REINS_URL with REINS_TOKEN,
like every other command; it logs to stderr only.

  claude mcp add reins -e REINS_TOKEN=$REINS_TOKEN -- reins mcp

reins serve also serves MCP over streamable HTTP at /mcp (docs/mcp.md).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := cmdContext()
			defer cancel()
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			s := mcp.New(cl, mcp.Options{Local: true, Version: version}, &sdk.ServerOptions{Logger: log})
			err = s.Run(ctx, &sdk.StdioTransport{})
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
}
