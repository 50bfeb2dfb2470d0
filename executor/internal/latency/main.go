// Command latency measures exec round trips and transfers against a running
// executor (temporary measuring tool).
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor/client"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func main() {
	sock := flag.String("socket", "", "")
	token := flag.String("token", "t", "")
	n := flag.Int("n", 200, "")
	dir := flag.String("dir", "/tmp", "")
	rounds := flag.Int("rounds", 3, "")
	mode := flag.String("mode", "", "up, down or both")
	idle := flag.Duration("idle", 0, "")
	smaps := flag.Bool("smaps", false, "")
	flag.Parse()
	ctx := context.Background()
	start := time.Now()
	c, err := client.WaitReady(ctx, *sock, *token)
	if err != nil {
		panic(err)
	}
	fmt.Println("ready after", time.Since(start))
	if u, err := c.Usage(ctx); err == nil {
		fmt.Printf("fresh executor RSS %d KiB\n", u.ExecutorRssBytes>>10)
	}
	printSmaps := func() {
		out, _, _, err := c.Run(ctx, "sh", "-c", "cat /proc/1/smaps")
		if err != nil {
			panic(err)
		}
		var name string
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 0 && strings.Contains(f[0], "-") {
				name = l
			}
			if strings.HasPrefix(l, "Rss:") && f[1] != "0" {
				fmt.Println(f[1], "kB", name)
			}
		}
	}
	if *smaps {
		printSmaps()
	}
	var d []time.Duration
	for range *n {
		t0 := time.Now()
		if _, err := c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"/bin/true"}}, nil); err != nil {
			panic(err)
		}
		d = append(d, time.Since(t0))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	fmt.Printf("exec true: p50 %v p90 %v p99 %v\n", d[len(d)/2], d[len(d)*9/10], d[len(d)*99/100])
	const size = 100 << 20
	for i := range *rounds {
		var hdr bytes.Buffer
		tw := tar.NewWriter(&hdr)
		tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
		tw.Flush()
		t0 := time.Now()
		if *mode != "down" || i == 0 {
			if _, err := c.Upload(ctx, *dir, io.MultiReader(&hdr, io.LimitReader(zeros{}, size+1024))); err != nil {
				panic(err)
			}
		}
		up := time.Since(t0)
		t0 = time.Now()
		if *mode != "up" {
			if _, err := c.Download(ctx, *dir+"/big", io.Discard); err != nil {
				panic(err)
			}
		}
		down := time.Since(t0)
		fmt.Printf("upload 100 MiB %v (%.0f MB/s), download %v (%.0f MB/s)\n", up, size/up.Seconds()/1e6, down, size/down.Seconds()/1e6)
	}
	u, err := c.Usage(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("executor RSS %d KiB, processes %d\n", u.ExecutorRssBytes>>10, u.Processes)
	time.Sleep(*idle)
	u, _ = c.Usage(ctx)
	fmt.Printf("executor RSS after %v idle: %d KiB\n", *idle, u.ExecutorRssBytes>>10)
	if *smaps {
		printSmaps()
	}
	os.Exit(0)
}
