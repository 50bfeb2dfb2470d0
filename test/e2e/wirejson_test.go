package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
)

// wireInt reads a 64-bit integer of the API's JSON: a number where it
// fits in 2^53−1, a decimal string beyond (server/wire's JSON form).
type wireInt int64

func (n *wireInt) UnmarshalJSON(data []byte) error {
	var v int64
	if err := json.Unmarshal([]byte(strings.Trim(string(data), `"`)), &v); err != nil {
		return err
	}
	*n = wireInt(v)
	return nil
}

// anyInt is a 64-bit integer of the API's JSON read into an any: a
// float64 or a string. Anything else (missing, not a number) is -1.
func anyInt(v any) int64 {
	switch x := v.(type) {
	case float64:
		return int64(x)
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	}
	return -1
}
