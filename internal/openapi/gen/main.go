// Command gen writes api/openapi.json (go generate ./internal/openapi, or
// go run ./internal/openapi/gen from the repository's root).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reinsdev/reins/internal/openapi"
)

func main() {
	out := flag.String("o", "api/openapi.json", "the file to write; the .proto sources are read from its directory")
	flag.Parse()
	doc, err := openapi.Generate(filepath.Dir(*out))
	if err == nil {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}
