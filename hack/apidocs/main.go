// Command apidocs writes the API reference (docs/api-reference.md) from the
// Go types of the API packages: for each version, each kind and each type
// its fields reach, a table of the fields with their JSON names, types,
// whether they are required, their defaults and their doc comments, and the
// values of enum types. It reads the source with go/parser and go/doc only,
// so it needs no build of the packages.
//
//	go run ./hack/apidocs -out docs/api-reference.md ./api/v1 ./api/v1alpha1
//
// make generate runs it; make verify-generated fails when the file is stale.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("out", "", "the Markdown file to write (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: apidocs [-out FILE] PACKAGE_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}

// run loads every package directory, in the order given, and writes the
// reference to out (standard output when empty).
func run(out string, dirs []string) error {
	var pkgs []*apiPackage
	for _, dir := range dirs {
		p, err := loadPackage(dir)
		if err != nil {
			return err
		}
		pkgs = append(pkgs, p)
	}
	md := render(pkgs)
	if out == "" {
		_, err := os.Stdout.WriteString(md)
		return err
	}
	return os.WriteFile(out, []byte(md), 0o644)
}
