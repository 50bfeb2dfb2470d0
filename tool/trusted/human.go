package trusted

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/reinsdev/reins/tool"
)

// ErrParkForHuman is what AskHuman.Call returns, wrapped in a
// *ParkForHuman: the call has not failed, it is waiting. The loop, on
// errors.As(err, &park), records the question durably, sets the run to wait
// for a person, and ends the step; no goroutine waits. When a person answers
// (CLI or API), the loop appends HumanAnswer(answer) as this call's result
// and the run goes on. ask_human has no side effects, so a call whose intent
// was logged without an answer may simply be parked again after a restart.
var ErrParkForHuman = errors.New("waiting for a person to answer")

// ParkForHuman carries the question the run is parked on.
type ParkForHuman struct {
	Question string
	Key      string // the call's idempotency key
}

func (p *ParkForHuman) Error() string {
	return "ask_human: " + ErrParkForHuman.Error() + ": " + p.Question
}

func (p *ParkForHuman) Unwrap() error { return ErrParkForHuman }

const maxQuestionChars = 4000

// AskHuman is the ask_human tool. It is a tool like the others, so the
// registry lists it and the policy sees it, but its Call never answers: it
// returns a *ParkForHuman (see ErrParkForHuman). The loop may instead
// recognise the name and park without calling; Call is then only the
// input check, which AskHumanQuestion offers too.
type AskHuman struct{}

var _ tool.Tool = AskHuman{}

// AskHumanSpec describes ask_human.
func AskHumanSpec() tool.Spec {
	return tool.Spec{
		Name: "ask_human",
		Description: "Ask the person responsible for this run one question and wait for the answer, which comes back as this tool's result. " +
			"Use it only when you cannot go on without a fact or a decision that only they have. " +
			"The run pauses until they answer, which may take hours. " +
			"At most 4000 characters; be specific, give the options you see and what you will do with each.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","description":"The question, self-contained."}},"required":["question"],"additionalProperties":false}`),
		Side:        tool.SideTrusted,
	}
}

// Spec implements tool.Tool.
func (AskHuman) Spec() tool.Spec { return AskHumanSpec() }

// Call implements tool.Tool: it checks input and returns a *ParkForHuman.
func (AskHuman) Call(ctx context.Context, key string, input json.RawMessage) (tool.Result, error) {
	q, err := AskHumanQuestion(input)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{}, &ParkForHuman{Question: q, Key: key}
}

// AskHumanQuestion returns the question of an ask_human call, or an error
// (errdefs.ErrInvalidArgument) saying what is wrong with input.
func AskHumanQuestion(input json.RawMessage) (string, error) {
	var in struct {
		Question string `json:"question"`
	}
	if err := decodeInput("ask_human", input, &in); err != nil {
		return "", err
	}
	q := strings.TrimSpace(in.Question)
	switch {
	case q == "":
		return "", invalidf("ask_human: question is required")
	case utf8.RuneCountInString(q) > maxQuestionChars:
		return "", invalidf("ask_human: question is %d characters; the limit is %d", utf8.RuneCountInString(q), maxQuestionChars)
	}
	return q, nil
}

// HumanAnswer is the result the loop gives the model once a person has
// answered. by names who answered (may be empty).
func HumanAnswer(answer, by string) tool.Result {
	prefix := "A person answered:\n"
	if by != "" {
		prefix = by + " answered:\n"
	}
	if strings.TrimSpace(answer) == "" {
		return tool.Result{Text: prefix + "(an empty answer)"}
	}
	return tool.Result{Text: prefix + answer}
}
