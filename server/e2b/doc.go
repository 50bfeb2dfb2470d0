// Package e2b serves E2B's API on a listener of its own (reins serve
// --e2b-addr), so that the unmodified e2b SDKs drive reins.
//
// It is a front end, not a second service: each E2B call becomes calls of
// reins' own API, made in process through the API's http.Handler with the
// caller's reins token, so that authentication, tenants, quotas and every
// check of the API hold for E2B callers unchanged.
//
//   - control.go: the control plane (X-API-KEY): /sandboxes, /v2/sandboxes,
//     timeout, pause, connect, metrics; E2B-shaped errors.
//   - envd: the data plane (E2b-Sandbox-Id, E2b-Sandbox-Port,
//     X-Access-Token): envd's Connect services process.Process and
//     filesystem.Filesystem, generated from E2B's published protos
//     (under E2B's repository license, Apache 2.0, kept beside them in
//     api/e2b), plus GET/POST /files and GET /health.
package e2b
