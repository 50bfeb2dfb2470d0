// Package agent is the brain's loop: a run is a log of events; a step reads
// the log, asks the model, and runs the tools it calls, writing each intent
// before acting and each result after.
//
// The conversation's vocabulary (Message, Block, Model) is package model's;
// the loop imports it and the providers implement it, never the reverse.
package agent
