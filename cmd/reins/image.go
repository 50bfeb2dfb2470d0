package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func imageCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build images on the service ahead of sandbox create",
	}
	c.AddCommand(imageBuildCmd())
	return group(c)
}

func imageBuildCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "build IMAGE",
		Short: "Build or pull an image now, so that sandbox create --image IMAGE starts at once",
		Long: `Build or pull an image on the service now, showing its progress, so that
sandbox create --image IMAGE starts at once. A built-in image (busybox,
debian, agents, desktop) is built from its recipe the first time and kept;
a registry image is pulled. An image the service has already is not built
again ("cached").

  reins image build desktop`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			bar := newStatusLine(os.Stderr)
			info, err := cl.BuildImage(ctx, args[0], bar.Progress)
			bar.Done()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), info)
			}
			how := "built"
			if info.Cached {
				how = "cached"
			}
			line := fmt.Sprintf("%s %s: %s, %s", info.Ref, how, info.Digest, humanBytes(info.SizeBytes))
			if info.Screen != "" {
				line += ", display " + info.Screen
			}
			fmt.Fprintln(c.OutOrStdout(), line)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the image as JSON")
	return c
}
