// Package api holds the API's descriptions: the protobuf packages below it
// and the OpenAPI document of its JSON form.
package api

import _ "embed"

// OpenAPI is api/openapi.json, the OpenAPI 3.1 description of the JSON
// API, written by internal/openapi (go generate ./internal/openapi).
//
//go:embed openapi.json
var OpenAPI []byte
