package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/reinsdev/reins/gateway"
)

// gateway measures what the model gateway adds to a streamed model call:
// an httptest Anthropic server streams events, each flushed; a client
// reads them straight from it and through the gateway (on a loopback TCP
// listener, the forward path), interleaved call by call. The server sends
// each text delta only when the client has read the one before (a
// channel, not a timer), so an event's time is its delivery, not the
// server's write loop coalesced into one read.
func (b *bench) gateway(n, events int) error {
	read := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "real-key" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		io.WriteString(w, `event: message_start`+"\n"+`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}`+"\n\n")
		f.Flush()
		io.WriteString(w, `event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n")
		f.Flush()
		for i := 0; i < events; i++ {
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word %d \"}}\n\n", i)
			f.Flush()
			select {
			case <-read:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer up.Close()
	g, err := gateway.New(gateway.Config{
		Ledger:    nopLedger{},
		Authorize: func(_ context.Context, _, tok string) bool { return tok == "rgw_bench" },
		Anthropic: gateway.Upstream{BaseURL: up.URL, Key: "real-key"},
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g, ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
		return gateway.WithSandbox(ctx, "bench")
	}}
	go srv.Serve(l)
	defer srv.Close()
	gwURL := "http://" + l.Addr().String()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	var firstO, firstB, eachO, eachB []time.Duration
	for i := -20; i < n; i++ {
		for _, direct := range []bool{false, true} {
			u, key := gwURL, "rgw_bench"
			if direct {
				u, key = up.URL, "real-key"
			}
			first, each, err := streamOnce(c, u+"/v1/messages", key, body, events, read)
			if err != nil {
				return err
			}
			if i < 0 {
				continue
			}
			if direct {
				firstB, eachB = append(firstB, first), append(eachB, each)
			} else {
				firstO, eachO = append(firstO, first), append(eachO, each)
			}
		}
	}
	b.add("gateway: first streamed byte, forward path (p50)", us(pct(firstO, 50)), us(pct(firstB, 50))+" straight to the provider", ratio(pct(firstO, 50), pct(firstB, 50)),
		fmt.Sprintf("≤ 2 ms added (%s)", us(pct(firstO, 50)-pct(firstB, 50))))
	b.add("gateway: first streamed byte, forward path (p99)", us(pct(firstO, 99)), us(pct(firstB, 99))+" straight to the provider", ratio(pct(firstO, 99), pct(firstB, 99)), "")
	b.add(fmt.Sprintf("gateway: per event, %d streamed one at a time (p50 of each call's mean)", events), us(pct(eachO, 50)),
		us(pct(eachB, 50))+" straight to the provider", ratio(pct(eachO, 50), pct(eachB, 50)),
		fmt.Sprintf("(%s added)", us(pct(eachO, 50)-pct(eachB, 50))))
	return nil
}

// streamOnce makes one streamed call and returns the time to its first
// body byte and the mean time per text delta, telling read of each.
func streamOnce(c *http.Client, u, key, body string, events int, read chan<- struct{}) (first, each time.Duration, err error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		return 0, 0, err
	}
	first = time.Since(t0)
	seen, deltas := 0, 0
	var t1 time.Time
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "event: ") {
			seen++
		}
		if strings.HasPrefix(line, `data: {"type":"content_block_delta"`) {
			if deltas == 0 {
				t1 = time.Now()
			}
			if deltas++; deltas == events {
				each = time.Since(t1) / time.Duration(events-1)
			}
			read <- struct{}{}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if want := events + 5; seen != want {
		return 0, 0, fmt.Errorf("%s: %d events, want %d", u, seen, want)
	}
	return first, each, nil
}

// nopLedger admits every call and keeps no record: the bench measures
// the gateway's own cost.
type nopLedger struct{}

func (nopLedger) Begin(context.Context, gateway.Call) (gateway.Admission, error) {
	return gateway.Admission{Entry: nopEntry{}}, nil
}

type nopEntry struct{}

func (nopEntry) End(context.Context, gateway.Result) {}
