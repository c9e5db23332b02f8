package docstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// block is one fenced code block of a Markdown file.
type block struct {
	doc  string // the Markdown file, relative to the module root
	line int    // the line of the opening fence, from 1
	lang string // the info string's first word, lower case
	text string // the content, without the fence's indentation
	mark marker // the docstest comment right before the fence
}

// marker is a <!-- docstest: kind arg --> comment.
type marker struct{ kind, arg string }

func (b block) String() string { return fmt.Sprintf("%s:%d", b.doc, b.line) }

// isGo reports whether the block is Go code.
func (b block) isGo() bool { return b.lang == "go" || b.lang == "golang" }

var (
	fenceOpen  = regexp.MustCompile("^( {0,3})(`{3,}|~{3,})\\s*([^`\\s]*)")
	markerLine = regexp.MustCompile(`^\s*<!--\s*docstest:\s*(\S+)(?:\s+(\S+))?\s*-->\s*$`)
	markerAny  = regexp.MustCompile(`^\s*<!--\s*docstest`)
)

var markerKinds = []string{"from", "file", "run", "output"}

// parseMarkdown returns the fenced code blocks of a Markdown file. A
// docstest marker that is malformed, of an unknown kind, or not right
// before a fence is an error, so that a typo cannot turn a check off.
func parseMarkdown(doc string, content []byte) ([]block, error) {
	lines := strings.Split(string(content), "\n")
	var blocks []block
	var errs []error
	var pending *marker
	pendingLine := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			indent, fence := m[1], m[2]
			b := block{doc: doc, line: i + 1, lang: strings.ToLower(m[3])}
			if pending != nil {
				b.mark = *pending
				pending = nil
			}
			var body []string
			closed := false
			for i++; i < len(lines); i++ {
				l := lines[i]
				if t := strings.TrimSpace(l); strings.HasPrefix(t, fence[:1]) && strings.Trim(t, fence[:1]) == "" && len(t) >= len(fence) {
					closed = true
					break
				}
				body = append(body, strings.TrimPrefix(l, indent))
			}
			if !closed {
				errs = append(errs, fmt.Errorf("%s:%d: the code block is never closed", doc, b.line))
				break
			}
			if len(body) > 0 {
				b.text = strings.Join(body, "\n") + "\n"
			}
			blocks = append(blocks, b)
			continue
		}
		if pending != nil {
			errs = append(errs, fmt.Errorf("%s:%d: a docstest marker must be on the line right before a code fence", doc, pendingLine))
			pending = nil
		}
		if m := markerLine.FindStringSubmatch(line); m != nil {
			if !slices.Contains(markerKinds, m[1]) {
				errs = append(errs, fmt.Errorf("%s:%d: unknown docstest marker %q (want one of %v)", doc, i+1, m[1], markerKinds))
				continue
			}
			if (m[1] == "from" || m[1] == "file") != (m[2] != "") {
				errs = append(errs, fmt.Errorf("%s:%d: docstest marker %q: from and file take a path, run and output nothing", doc, i+1, m[1]))
				continue
			}
			pending, pendingLine = &marker{m[1], m[2]}, i+1
		} else if markerAny.MatchString(line) {
			errs = append(errs, fmt.Errorf("%s:%d: malformed docstest marker: write <!-- docstest: KIND [PATH] --> alone on its line", doc, i+1))
		}
	}
	if pending != nil {
		errs = append(errs, fmt.Errorf("%s:%d: a docstest marker must be on the line right before a code fence", doc, pendingLine))
	}
	return blocks, errors.Join(errs...)
}

// docFiles lists the Markdown files whose code is checked, relative to
// root: README.md and docs/*.md.
func docFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out, nil
}

// allBlocks parses every checked Markdown file under root.
func allBlocks(root string) ([]block, error) {
	docs, err := docFiles(root)
	if err != nil {
		return nil, err
	}
	var blocks []block
	var errs []error
	for _, d := range docs {
		content, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bs, err := parseMarkdown(d, content)
		errs = append(errs, err)
		blocks = append(blocks, bs...)
	}
	return blocks, errors.Join(errs...)
}

// dedent removes the indentation (tabs or spaces) common to every
// non-blank line.
func dedent(lines []string) []string {
	common := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			common, first = ind, false
			continue
		}
		for !strings.HasPrefix(ind, common) {
			common = common[:len(common)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimPrefix(l, common)
		if strings.TrimSpace(out[i]) == "" {
			out[i] = ""
		}
	}
	return out
}

// isExcerpt reports whether the block's lines appear, in order and
// together, in file, once the common indentation of each is removed.
func isExcerpt(blockText, file string) bool {
	want := dedent(strings.Split(strings.TrimRight(blockText, "\n"), "\n"))
	lines := strings.Split(file, "\n")
	for i := 0; i+len(want) <= len(lines); i++ {
		if slices.Equal(dedent(lines[i:i+len(want)]), want) {
			return true
		}
	}
	return false
}
