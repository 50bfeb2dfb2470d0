// Command gwclient is the program in the sandbox of the gateway benchmark
// (bench -only gateway): it GETs two URLs in turn, n times each, on a
// kept-alive connection and on a new connection each, and prints the
// median round trip of each as JSON (nanoseconds).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	ours := flag.String("ours", "", "the URL measured")
	base := flag.String("base", "", "the baseline URL")
	n := flag.Int("n", 300, "round trips per URL and mode")
	flag.Parse()
	out := map[string]int64{}
	for _, keepAlive := range []bool{true, false} {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keepAlive, DisableCompression: true, Proxy: nil}}
		var o, b []time.Duration
		for range *n {
			for _, u := range []struct {
				url string
				ds  *[]time.Duration
			}{{*ours, &o}, {*base, &b}} {
				t0 := time.Now()
				resp, err := c.Get(u.url)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				*u.ds = append(*u.ds, time.Since(t0))
			}
		}
		mode := "new"
		if keepAlive {
			mode = "kept"
		}
		out[mode+"_ours"], out[mode+"_base"] = int64(median(o)), int64(median(b))
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}
