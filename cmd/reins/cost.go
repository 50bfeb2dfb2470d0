package main

import (
	"fmt"
	"strings"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// offline says whether a run's model is the script: provider, which
// plays a file and charges nothing (agent.DefaultPrices has no script
// price): its runs show no cost rather than "$0.0000" (docs/decisions).
func offline(spec *reinsv1.RunSpec) bool {
	return strings.HasPrefix(spec.GetModel(), "script:")
}

// costWords is a run's cost as runs show prints it.
func costWords(r *reinsv1.Run) string {
	if r.CostUsd == 0 && offline(r.Spec) {
		return "none (offline model)"
	}
	return fmt.Sprintf("$%.4f", r.CostUsd)
}

// costCell is costWords for a table cell and a one-line summary: "-"
// for an offline model.
func costCell(r *reinsv1.Run) string {
	if r.CostUsd == 0 && offline(r.Spec) {
		return "-"
	}
	return fmt.Sprintf("$%.4f", r.CostUsd)
}
