//go:build ignore

// mkdb makes the SQLite database TestTrustedTools queries.
package main

import (
	"database/sql"
	"log"
	"os"

	_ "modernc.org/sqlite"
)

func main() {
	db, err := sql.Open("sqlite", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE customers (name TEXT, plan TEXT)",
		"INSERT INTO customers VALUES ('alice', 'pro'), ('bob', 'free')",
	} {
		if _, err := db.Exec(q); err != nil {
			log.Fatal(err)
		}
	}
	db.Close()
}
