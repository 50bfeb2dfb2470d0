package trusted

import "strings"

// IsReadOnlySQL reports whether query is a single statement that only
// reads: SELECT, WITH … SELECT, EXPLAIN, SHOW, or VALUES. It is conservative:
// anything it cannot place — another statement kind, several statements, a
// keyword that writes or locks anywhere in the text (a data-modifying CTE,
// SELECT … INTO, FOR UPDATE, EXPLAIN ANALYZE DELETE …) — counts as a write.
// The policy uses it to match "a statement that writes".
//
// It is a classifier, not the guard: sql_query enforces read-only mode in the
// database itself (a read-only SQLite connection, a READ ONLY Postgres
// transaction), because a SELECT can still call a function that writes.
//
// The text is read under every lexical dialect that SQLite and Postgres
// disagree on (backslash escapes in strings, dollar quoting, nested
// comments, bracket and backtick identifiers), and only a query that reads
// under all of them counts as read-only, so quoting tricks that hide a
// keyword from one reading are caught by another. The price is a few false
// writes: a keyword inside a $$…$$ string (SQLite would read it as code), or
// inside [brackets] (Postgres would).
func IsReadOnlySQL(query string) bool {
	for d := lexDialect(0); d < lexAll; d++ {
		if !readOnlyUnder(query, d) {
			return false
		}
	}
	return true
}

// lexDialect is a set of lexical rules to read SQL with.
type lexDialect uint8

const (
	lexBackslash lexDialect = 1 << iota // '\'' escapes in string literals
	lexDollar                           // $tag$ … $tag$ strings (Postgres)
	lexNested                           // nested /* /* */ */ comments (Postgres)
	lexBrackets                         // [ident] and `ident` (SQLite)
	lexAll
)

// readFirst are the statement kinds that only read.
var readFirst = map[string]bool{
	"SELECT": true, "WITH": true, "EXPLAIN": true, "SHOW": true, "VALUES": true,
}

// writeWords are keywords that, anywhere in a statement, mean it may write,
// lock or change session state.
var writeWords = map[string]bool{
	// Not REPLACE: replace() is a common string function, and REPLACE INTO
	// can only start a statement, which readFirst already refuses.
	"INSERT": true, "UPDATE": true, "DELETE": true, "MERGE": true, "UPSERT": true,
	"INTO": true, "CREATE": true, "DROP": true, "ALTER": true, "TRUNCATE": true,
	"GRANT": true, "REVOKE": true, "COPY": true, "CALL": true, "DO": true,
	"LOCK": true, "ATTACH": true, "DETACH": true, "PRAGMA": true,
	"VACUUM": true, "REINDEX": true, "SET": true, "RESET": true,
	"LISTEN": true, "NOTIFY": true, "UNLISTEN": true, "DISCARD": true,
	"PREPARE": true, "EXECUTE": true, "DEALLOCATE": true, "REFRESH": true,
	"CLUSTER": true, "COMMENT": true, "IMPORT": true, "LOAD": true,
	"BEGIN": true, "COMMIT": true, "ROLLBACK": true, "SAVEPOINT": true,
	"RELEASE": true, "CHECKPOINT": true, "SECURITY": true,
}

func readOnlyUnder(query string, d lexDialect) bool {
	stmts := 0
	first := ""
	inStmt := false
	prev := ""
	ok := lexSQL(query, d, func(tok string) bool {
		if tok == ";" {
			if inStmt {
				inStmt = false
			}
			prev = ""
			return true
		}
		if !inStmt {
			inStmt = true
			stmts++
			first = ""
		}
		if stmts > 1 {
			return false
		}
		if tok == "(" && first == "" {
			return true // (SELECT …) UNION (SELECT …)
		}
		word := strings.ToUpper(tok)
		if first == "" {
			first = word
			if !readFirst[first] {
				return false
			}
		}
		if writeWords[word] {
			return false
		}
		if prev == "FOR" && (word == "SHARE" || word == "NO" || word == "KEY") {
			return false // FOR SHARE, FOR NO KEY UPDATE, FOR KEY SHARE lock rows
		}
		prev = word
		return true
	})
	return ok && stmts == 1 && first != ""
}

// lexSQL calls emit with each bare word, each "(" and each ";" of query,
// skipping literals, quoted identifiers, comments and other punctuation. It
// stops and reports false when emit does, or when a literal or comment is
// not closed.
func lexSQL(q string, d lexDialect, emit func(tok string) bool) bool {
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				return true
			}
			i += end + 1
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			end := blockCommentEnd(q, i, d&lexNested != 0)
			if end < 0 {
				return false
			}
			i = end
		case c == '\'':
			// E'…' strings always take backslash escapes in Postgres.
			esc := d&lexBackslash != 0 || (i > 0 && (q[i-1] == 'E' || q[i-1] == 'e') && (i < 2 || !isWordByte(q[i-2])))
			end := quotedEnd(q, i, '\'', esc)
			if end < 0 {
				return false
			}
			i = end
		case c == '"':
			end := quotedEnd(q, i, '"', false)
			if end < 0 {
				return false
			}
			i = end
		case d&lexBrackets != 0 && c == '`':
			end := quotedEnd(q, i, '`', false)
			if end < 0 {
				return false
			}
			i = end
		case d&lexBrackets != 0 && c == '[':
			end := strings.IndexByte(q[i:], ']')
			if end < 0 {
				return false
			}
			i += end + 1
		case d&lexDollar != 0 && c == '$':
			tag, ok := dollarTag(q[i:])
			if !ok {
				i++ // $1: a parameter
				for i < len(q) && isWordByte(q[i]) {
					i++
				}
				continue
			}
			end := strings.Index(q[i+len(tag):], tag)
			if end < 0 {
				return false
			}
			i += len(tag) + end + len(tag)
		case c == ';' || c == '(':
			if !emit(string(c)) {
				return false
			}
			i++
		case isWordByte(c):
			// Both dialects allow $ inside an identifier (a$b), never first.
			j := i
			for j < len(q) && (isWordByte(q[j]) || q[j] == '$') {
				j++
			}
			if !emit(q[i:j]) {
				return false
			}
			i = j
		default:
			i++
		}
	}
	return true
}

// blockCommentEnd returns the index just past the comment that opens at i,
// or -1 if it is not closed.
func blockCommentEnd(q string, i int, nested bool) int {
	depth := 0
	for i < len(q) {
		switch {
		case strings.HasPrefix(q[i:], "/*"):
			if depth == 0 || nested {
				depth++
			}
			i += 2
		case strings.HasPrefix(q[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return -1
}

// quotedEnd returns the index just past the literal that opens at i with
// quote, where a doubled quote stands for itself, or -1 if it is not closed.
func quotedEnd(q string, i int, quote byte, backslash bool) int {
	for i++; i < len(q); i++ {
		switch {
		case backslash && q[i] == '\\':
			i++
		case q[i] == quote && i+1 < len(q) && q[i+1] == quote:
			i++
		case q[i] == quote:
			return i + 1
		}
	}
	return -1
}

// dollarTag returns the opening tag of a dollar-quoted string at the start
// of s ("$$" or "$name$").
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1], true
		case j == 1 && s[j] >= '0' && s[j] <= '9':
			return "", false
		case !isWordByte(s[j]):
			return "", false
		}
	}
	return "", false
}

// isWordByte reports whether b may be part of a bare word. Bytes of
// multi-byte runes count as word bytes, so a non-ASCII identifier is one
// word.
func isWordByte(b byte) bool {
	return b == '_' || b >= 0x80 || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}
