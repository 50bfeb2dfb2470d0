package e2b_test

import (
	"encoding/json"
	"errors"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func errorsIs(err, kind error) bool { return errors.Is(err, kind) }
