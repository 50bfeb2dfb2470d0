// Package trusted holds the tools that run inside the reins service, never in
// a sandbox: sql_query, send_email, http_request and ask_human. They touch
// private systems with credentials the sandbox never sees, so each one is
// fenced by its configuration (a read-only database, allowed recipients,
// allowed hosts) and carries the labels the policy reads.
//
// How a call fails: Call returns an error, wrapping one errdefs kind, when
// the call was refused or could not be carried out — bad input
// (errdefs.ErrInvalidArgument), refused by configuration
// (errdefs.ErrPermissionDenied), the mail or web server unreachable
// (errdefs.ErrUnavailable) or silent (errdefs.ErrTimeout). It returns a
// Result with IsError when the remote system answered with a failure the
// model may fix: an SQL error, a recipient the mail server rejected, an HTTP
// status of 400 or more. Either way the text says what happened and what to
// do next, since the model reads it.
//
// ask_human is not a call that returns: Call returns a *ParkForHuman error
// (errors.Is(err, ErrParkForHuman)) and the loop parks the run until a
// person answers; see AskHuman.
package trusted
