package anthropic

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// The computer tool is sent as Anthropic's native computer-use tool
// (the version of the newest models, with zoom), which lives in the Beta
// Messages API behind its beta flag. A request with it goes there; the
// rest of the request is the one params built for the Messages API (the
// Beta API takes the same body), with the native tool in place of the
// stand-in params left at its index. The answer comes back as a
// BetaMessage and is read as a Message: its text and tool_use blocks are
// the same.
const computerBeta = "computer-use-2025-11-24" // with the tool type computer_20251124

// betaParams is the Beta request for req when it carries the computer
// tool, nil when it does not.
func betaParams(req *model.Request, p sdk.MessageNewParams) (*sdk.BetaMessageNewParams, error) {
	at := -1
	for i, t := range req.Tools {
		if t.Computer != nil {
			if at >= 0 {
				return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "anthropic: the request has two computer tools; a model drives one screen")
			}
			at = i
		}
	}
	if at < 0 {
		return nil, nil
	}
	d := req.Tools[at].Computer
	native := sdk.BetaToolComputerUse20251124Param{DisplayWidthPx: int64(d.Width), DisplayHeightPx: int64(d.Height), EnableZoom: sdk.Bool(true)}
	if at == len(req.Tools)-1 {
		native.CacheControl = sdk.NewBetaCacheControlEphemeralParam()
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encoding the request: %w", err)
	}
	var fields map[string]json.RawMessage
	var tools []json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("anthropic: encoding the request: %w", err)
	}
	if err := json.Unmarshal(fields["tools"], &tools); err != nil || len(tools) != len(req.Tools) {
		return nil, fmt.Errorf("anthropic: encoding the request's tools: %v", err)
	}
	if tools[at], err = json.Marshal(native); err != nil {
		return nil, fmt.Errorf("anthropic: encoding the computer tool: %w", err)
	}
	fields["tools"], _ = json.Marshal(tools)
	body, _ = json.Marshal(fields)
	bp := sdk.BetaMessageNewParams{Betas: []sdk.AnthropicBeta{computerBeta}}
	param.SetJSON(body, &bp)
	return &bp, nil
}

// newBeta sends a Beta request and reads its answer as a Message.
func (m *Model) newBeta(ctx context.Context, p sdk.BetaMessageNewParams) (*sdk.Message, error) {
	bm, err := m.client.Beta.Messages.New(ctx, p)
	if err != nil {
		return nil, err
	}
	var msg sdk.Message
	if err := json.Unmarshal([]byte(bm.RawJSON()), &msg); err != nil {
		return nil, fmt.Errorf("anthropic: reading the answer: %w", err)
	}
	return &msg, nil
}
