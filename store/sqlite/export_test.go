package sqlite

// SetEgressKeep bounds each sandbox's egress log to n entries, so that
// the conformance suite checks the bound without writing 100 000 of them.
func (s *Store) SetEgressKeep(n int) { s.egressKeep = n }
