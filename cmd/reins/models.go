package main

import (
	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/anthropic"
	"github.com/reinsdev/reins/model/openai"
	"github.com/reinsdev/reins/model/script"
)

// openModel is the registry of model providers: one place, by name.
func openModel(spec string) (agent.Model, string, error) {
	provider, name, err := model.Parse(spec)
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
		m, err := script.Load(name)
		return m, name, err
	}
}
