package agent

import (
	"strings"

	"github.com/reinsdev/reins/model"
)

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read,omitempty"`
	CacheWrite float64 `json:"cache_write,omitempty"`
}

// Prices maps "provider:model" (or "provider:*") to a price.
type Prices map[string]Price

// DefaultPrices are list prices at the time of writing; operators override
// them in config. script: models charge nothing, so they have no price
// (a run of one reports no cost); a config that prices "script:*" tests
// cost budgets offline.
func DefaultPrices() Prices {
	return Prices{
		"anthropic:claude-opus-4-1":   {Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75},
		"anthropic:claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		"anthropic:claude-haiku-4-5":  {Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25},
		"anthropic:*":                 {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		"openai:gpt-4.1":              {Input: 2, Output: 8, CacheRead: 0.5},
		"openai:gpt-4.1-mini":         {Input: 0.4, Output: 1.6, CacheRead: 0.1},
		"openai:*":                    {Input: 2, Output: 8, CacheRead: 0.5},
	}
}

// Cost prices usage for the model spec ("provider:name"); unknown models cost 0.
func (p Prices) Cost(spec string, u model.Usage) float64 {
	price, ok := p[spec]
	if !ok {
		provider, _, _ := strings.Cut(spec, ":")
		price = p[provider+":*"]
	}
	return (float64(u.InputTokens)*price.Input + float64(u.OutputTokens)*price.Output +
		float64(u.CacheReadTokens)*price.CacheRead + float64(u.CacheWriteTokens)*price.CacheWrite) / 1e6
}
