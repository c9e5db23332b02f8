// Package docstest keeps the documentation honest: its tests compile every
// Go code block in README.md and docs/*.md, run the ones marked to run, and
// check that every block copied from a file still matches that file. It
// has no code of its own; `go test ./internal/docstest/` runs it, and so
// does `make test`.
//
// # The rules for a code block
//
// A fenced block whose language is go is one of:
//
//   - a complete Go file, starting (after comments) with its package
//     clause: it is built on its own, as a package of this module, and must
//     be gofmt-formatted;
//   - an excerpt of a file of this repository that builds, marked on the
//     line right before the fence with
//     <!-- docstest: from path/to/file.go -->: the block must be whole lines
//     of that file, in order, with their common indentation removed (the
//     file's package is built too);
//   - a whole file, marked with <!-- docstest: file path/to/file.go -->:
//     the block must equal the file.
//
// A fragment that is none of these fails the test: write the program out,
// or put the code in a file that builds and show an excerpt of it.
//
// A block in another language is checked only when it is marked with
// file or from (a script or SQL statement a test runs, shown in the docs).
//
// A complete Go program marked <!-- docstest: run --> is also run, in an
// empty directory, without the POSTROOM_* variables of the environment,
// and must be followed by a block marked <!-- docstest: output -->: once the
// program has printed every line of that block (compared as a set of
// lines, since concurrent handlers print in any order) it gets an
// interrupt, as from Ctrl-C, and must exit with status 0 having printed
// nothing else. A program that exits by itself is compared the same way.
//
// Blocks are built in a temporary directory under testdata/, inside the
// module, so the build uses this module's go.mod and the module cache, and
// needs no network. Compiler errors name the Markdown file and line.
package docstest
