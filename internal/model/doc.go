// Package model is the shared vocabulary of Rosetta: identifiers, offsets,
// positions, messages and the sentinel errors that every layer speaks.
//
// It depends on the standard library only. Distinct quantities have distinct
// named types (QueueOffset, LogPos, Index, Term) so that a physical position in
// the commit log can never be passed where a logical queue offset is expected.
package model
