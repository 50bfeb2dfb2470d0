// Command portserver is the server the ports tests run inside sandboxes:
// /headers answers with the request's host, query and headers (what
// reached the sandbox), /ws echoes WebSocket messages, /hold answers at
// once and then holds the response open until the caller leaves, and
// /bytes?n=N sends N bytes.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3001", "where to listen")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "query": r.URL.RawQuery, "header": r.Header})
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("held\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	chunk := make([]byte, 64<<10)
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			m := min(n, len(chunk))
			if _, err := w.Write(chunk[:m]); err != nil {
				return
			}
			n -= m
		}
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
