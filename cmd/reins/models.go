package main

import (
	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/anthropic"
	"github.com/reinsdev/reins/model/openai"
	"github.com/reinsdev/reins/model/script"
)

// openModel is the registry of model providers: one place, by name.
func openModel(spec agent.ModelSpec) (model.Model, string, error) {
	provider, name, err := model.Parse(spec.Model)
	if err != nil {
		return nil, "", err
	}
	switch provider {
	case "anthropic":
		m, err := anthropic.New(anthropic.Config{Model: name})
		return m, name, err
	case "openai":
		m, err := openai.New(openai.Config{Model: name})
		return m, name, err
	default: // "script": Parse accepts nothing else
		// Inline, or a file on this host for the admin only.
		m, err := script.Open(name, spec.Script, spec.Tenant == "")
		return m, name, err
	}
}
