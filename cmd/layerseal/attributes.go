package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
)

// attributeNotes returns the .gitattributes notes of the staged session
// arg names (layerseal.Review.AttributeNotes), never nil for one; nil,
// and no error, when arg is no staged session this user can open for
// review.
func attributeNotes(cmd *cli.Command, arg string) ([]layerseal.AttributeNote, error) {
	r, err := storeOf(cmd).OpenReview(arg)
	if err != nil {
		return nil, nil
	}
	defer r.Close()
	notes, err := r.AttributeNotes()
	if notes == nil && err == nil {
		notes = []layerseal.AttributeNote{}
	}
	return notes, err
}

// writeAttributeNotes prints one line per note, after prefix.
func writeAttributeNotes(w io.Writer, prefix string, notes []layerseal.AttributeNote) {
	for _, n := range notes {
		fmt.Fprintf(w, "%snote: %s\n", prefix, printable(n.String()))
	}
}

// sessionAttributeNotes is attributeNotes of the session info names (nil
// when info is nil).
func sessionAttributeNotes(cmd *cli.Command, info *layerseal.SessionInfo) ([]layerseal.AttributeNote, error) {
	if info == nil {
		return nil, nil
	}
	return attributeNotes(cmd, info.ID)
}

// addAttributeNotes sets the member "git_attributes" of a --json object
// to notes, unless notes is nil (no staged session to read them from).
func addAttributeNotes(m map[string]any, notes []layerseal.AttributeNote) {
	if notes != nil {
		m["git_attributes"] = notes
	}
}
