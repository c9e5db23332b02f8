package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// purgeProgress shows a purge's progress per table: a bar redrawn in place
// on a terminal, a plain line at most once a second otherwise.
type purgeProgress struct {
	out     io.Writer
	tty     bool
	pending map[string]int64 // rows to delete per table, counted first
	table   string           // the table of the last update
	last    time.Time
}

func newPurgeProgress(out io.Writer, tty bool) *purgeProgress {
	return &purgeProgress{out: out, tty: tty}
}

// update is called after each batch with the rows deleted from table so far.
func (p *purgeProgress) update(table string, deleted int64) {
	total := max(p.pending[table], deleted)
	switch {
	case p.tty:
		if p.table != "" && p.table != table {
			fmt.Fprintln(p.out)
		}
		fmt.Fprintf(p.out, "\r%s", progressBar(table, deleted, total, 30))
	case p.table != table || time.Since(p.last) >= time.Second || deleted == total:
		fmt.Fprintf(p.out, "purge %s: %d of %d rows\n", table, deleted, total)
		p.last = time.Now()
	}
	p.table = table
}

// done ends the bar's line.
func (p *purgeProgress) done() {
	if p.tty && p.table != "" {
		fmt.Fprintln(p.out)
	}
}

// progressBar renders "table [#####.....]  50% 5/10".
func progressBar(table string, done, total int64, width int) string {
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	filled := int(frac * float64(width))
	return fmt.Sprintf("%s [%s%s] %3.0f%% %d/%d", table, strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100, done, total)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
