package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The documentation holds to what it points at: every relative link of every
// Markdown file resolves (the file exists and, for a #anchor, a heading of
// it makes that anchor, as GitHub makes them), and every `make <target>` it
// names is a target of the Makefile.

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// mdFile is one Markdown file, read into what the checks need.
type mdFile struct {
	path    string          // slash-separated, relative to the repository
	paras   []mdText        // prose outside code blocks: paragraphs, lines joined by \n
	spans   []mdText        // the contents of the inline code spans of the prose
	code    []mdText        // the lines of shell code blocks
	refs    []mdText        // the targets of reference definitions ([x]: target)
	anchors map[string]bool // the anchors its headings (and <a id/name>) make
}

// mdText is text of a Markdown file and the line it starts on.
type mdText struct {
	line int
	text string
}

// markdownFiles lists the repository's Markdown files: those git tracks and
// those it would (new, not ignored), that exist.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md")
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v\n%s", err, stderr.String())
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if _, err := os.Stat(filepath.Join(repoRoot, f)); err == nil {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("git lists no Markdown file")
	}
	return files
}

// docs reads and parses Markdown files by repository path, once each.
type docs struct {
	files map[string]*mdFile
}

func (d *docs) get(rel string) (*mdFile, error) {
	if f, ok := d.files[rel]; ok {
		return f, nil
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	f := parseMarkdown(rel, string(b))
	d.files[rel] = f
	return f, nil
}

var (
	fenceOpen   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([A-Za-z0-9_+-]*)")
	headingLine = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	refDef      = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
	htmlAnchor  = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	inlineLink  = regexp.MustCompile(`\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
)

// shellFences are the code blocks whose lines are commands.
var shellFences = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "zsh": true}

// parseMarkdown splits a file into prose paragraphs, code, headings and
// reference definitions.
func parseMarkdown(rel, text string) *mdFile {
	f := &mdFile{path: rel, anchors: map[string]bool{}}
	slugs := map[string]int{}
	var para []string
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			f.addPara(paraStart, strings.Join(para, "\n"))
			para = nil
		}
	}
	fence, shell := "", false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case fence != "":
			if strings.HasPrefix(strings.TrimSpace(line), fence) {
				fence = ""
			} else if shell {
				f.code = append(f.code, mdText{n, line})
			}
		case fenceOpen.MatchString(line):
			flush()
			m := fenceOpen.FindStringSubmatch(line)
			fence, shell = m[1], shellFences[strings.ToLower(m[2])]
		case headingLine.MatchString(line):
			flush()
			f.addHeading(slugs, headingLine.FindStringSubmatch(line)[2])
			f.addPara(n, line)
		case strings.TrimSpace(line) == "":
			flush()
		default:
			if m := refDef.FindStringSubmatch(line); m != nil {
				f.refs = append(f.refs, mdText{n, m[1]})
				continue
			}
			if len(para) == 0 {
				paraStart = n
			}
			para = append(para, line)
		}
	}
	flush()
	return f
}

// addPara keeps a paragraph with its code spans blanked (so no link is
// read inside code), and the spans' contents apart.
func (f *mdFile) addPara(start int, text string) {
	prose, spans := cutCodeSpans(text)
	for _, s := range spans {
		f.spans = append(f.spans, mdText{start + strings.Count(text[:s[0]], "\n"), text[s[0]:s[1]]})
	}
	f.paras = append(f.paras, mdText{start, prose})
	for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
		f.anchors[m[1]] = true
	}
}

// addHeading records the anchor GitHub gives a heading: the first of a
// slug as is, the next ones with -1, -2, ...
func (f *mdFile) addHeading(slugs map[string]int, heading string) {
	s := headingSlug(heading)
	if n := slugs[s]; n > 0 {
		f.anchors[fmt.Sprintf("%s-%d", s, n)] = true
	} else {
		f.anchors[s] = true
	}
	slugs[s]++
}

// cutCodeSpans returns text with every inline code span's contents turned
// to spaces (line breaks kept), and the spans' content offsets.
func cutCodeSpans(text string) (string, [][2]int) {
	b := []byte(text)
	var spans [][2]int
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := run(b, i)
		end := closingRun(b, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		spans = append(spans, [2]int{i + n, end})
		for j := i + n; j < end; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i = end + n
	}
	return string(b), spans
}

// run is the length of the run of backticks at i.
func run(b []byte, i int) int {
	n := 0
	for i+n < len(b) && b[i+n] == '`' {
		n++
	}
	return n
}

// closingRun is where a run of exactly n backticks starts at or after i,
// or -1.
func closingRun(b []byte, i, n int) int {
	for i < len(b) {
		if b[i] != '`' {
			i++
			continue
		}
		m := run(b, i)
		if m == n {
			return i
		}
		i += m
	}
	return -1
}

var (
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	schemeLike = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// headingSlug is GitHub's anchor for a heading's text: the rendered text
// (links as their text, code without backticks, no HTML), lower case, every
// character but letters, digits, '-', '_' and spaces removed, spaces to '-'.
func headingSlug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// links are the link targets of a file's prose and reference definitions,
// each with its line.
func (f *mdFile) links() []mdText {
	var out []mdText
	for _, p := range f.paras {
		for _, m := range inlineLink.FindAllStringSubmatchIndex(p.text, -1) {
			line := p.line + strings.Count(p.text[:m[0]], "\n")
			out = append(out, mdText{line, p.text[m[2]:m[3]]})
		}
	}
	return append(out, f.refs...)
}

// checkLink says what is wrong with a link of file from, or "".
func (d *docs) checkLink(from *mdFile, target string) string {
	if target == "" || schemeLike.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	p, anchor, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("cannot unescape the path: %v", err)
	}
	dest := from
	if p != "" {
		rel := path.Clean(path.Join(path.Dir(from.path), p))
		if strings.HasPrefix(p, "/") {
			rel = path.Clean(strings.TrimPrefix(p, "/"))
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
			return fmt.Sprintf("%s does not exist", rel)
		}
		if anchor == "" || !strings.HasSuffix(rel, ".md") {
			return ""
		}
		if dest, err = d.get(rel); err != nil {
			return err.Error()
		}
	}
	if anchor != "" && !dest.anchors[anchor] {
		return fmt.Sprintf("no heading of %s makes the anchor #%s", dest.path, anchor)
	}
	return ""
}

// TestDocsLinksResolve fails on a relative link of a Markdown file whose
// target does not exist or whose anchor no heading of the target makes.
func TestDocsLinksResolve(t *testing.T) {
	d := &docs{files: map[string]*mdFile{}}
	var broken []string
	checked := 0
	for _, rel := range markdownFiles(t) {
		f, err := d.get(rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range f.links() {
			checked++
			if why := d.checkLink(f, l.text); why != "" {
				broken = append(broken, fmt.Sprintf("%s:%d → %s: %s", f.path, l.line, l.text, why))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link found in the Markdown files")
	}
	if len(broken) > 0 {
		t.Errorf("%d broken link(s) of %d:\n  %s", len(broken), checked, strings.Join(broken, "\n  "))
	}
}

// makefileTargets are the Makefile's targets: the names before a colon at
// the start of a line (not an assignment), and those .PHONY lists.
func makefileTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*:([^=]|$)`)
	for _, line := range strings.Split(string(b), "\n") {
		if phony, ok := strings.CutPrefix(line, ".PHONY:"); ok {
			for _, name := range strings.Fields(phony) {
				targets[name] = true
			}
			continue
		}
		if m := rule.FindStringSubmatch(line); m != nil {
			targets[m[1]] = true
		}
	}
	if len(targets) < 10 {
		t.Fatalf("read %d targets from the Makefile", len(targets))
	}
	return targets
}

var (
	commandSep = regexp.MustCompile(`;|&&|\|\||\||\(|\)`)
	targetName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	envAssign  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// makeFlagsWithArg are make's flags that take the next word.
var makeFlagsWithArg = map[string]bool{"-C": true, "-f": true, "-I": true, "-o": true, "-W": true}

// makeTargets are the targets a command line asks make for: in each
// command of the line (comments cut), after "make" (and a prompt, sudo or
// variable assignments before it), the words that are neither flags nor
// assignments, up to the first that is no target name.
func makeTargets(line string) []string {
	if i := commentStart(line); i >= 0 {
		line = line[:i]
	}
	var out []string
	for _, cmd := range commandSep.Split(line, -1) {
		words := strings.Fields(cmd)
		for len(words) > 0 && (words[0] == "$" || words[0] == "sudo" || envAssign.MatchString(words[0])) {
			words = words[1:]
		}
		if len(words) == 0 || words[0] != "make" {
			continue
		}
		out = append(out, targetWords(words[1:])...)
	}
	return out
}

// targetWords are the targets among make's arguments.
func targetWords(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		w := args[i]
		switch {
		case makeFlagsWithArg[w]:
			i++
		case strings.HasPrefix(w, "-"), strings.Contains(w, "="):
		case targetName.MatchString(w):
			out = append(out, w)
		default:
			return out
		}
	}
	return out
}

// commentStart is where a shell comment starts in line (a # at the start
// or after a space), or -1.
func commentStart(line string) int {
	for i, r := range line {
		if r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return i
		}
	}
	return -1
}

// TestDocsMakeTargetsExist fails on a `make <target>` of a Markdown file
// (in a code span or a shell code block) that the Makefile does not have.
func TestDocsMakeTargetsExist(t *testing.T) {
	targets := makefileTargets(t)
	d := &docs{files: map[string]*mdFile{}}
	var missing []string
	named := 0
	for _, rel := range markdownFiles(t) {
		f, err := d.get(rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range append(append([]mdText{}, f.spans...), f.code...) {
			for _, target := range makeTargets(strings.ReplaceAll(c.text, "\n", " ")) {
				named++
				if !targets[target] {
					missing = append(missing, fmt.Sprintf("%s:%d → make %s: the Makefile has no target %q", f.path, c.line, target, target))
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no `make <target>` found in the Markdown files")
	}
	if len(missing) > 0 {
		t.Errorf("%d make target(s) of %d named in Markdown do not exist:\n  %s", len(missing), named, strings.Join(missing, "\n  "))
	}
}

// TestDocsCheckerFindsBreakage runs the checks on a made-up file, so that a
// checker that finds nothing cannot pass for a clean repository.
func TestDocsCheckerFindsBreakage(t *testing.T) {
	f := parseMarkdown("docs/x.md", "# Top\n\n## Top\n\n## A `code` (heading), with [a link](y.md)\n\n"+
		"See [here](#top-1), [there](#a-code-heading-with-a-link), [gone](#nowhere) and `[not](a-link.md)`.\n\n"+
		"```sh\nmake test-unit    # not `make nothing`\nsudo E2E_FULL=1 make -C . test-faults bench X=1 && make lint\n```\n")
	for _, a := range []string{"top", "top-1", "a-code-heading-with-a-link"} {
		if !f.anchors[a] {
			t.Errorf("anchor %q not made; have %v", a, f.anchors)
		}
	}
	var links []string
	for _, l := range f.links() {
		links = append(links, fmt.Sprintf("%d:%s", l.line, l.text))
	}
	if got, want := strings.Join(links, " "), "5:y.md 7:#top-1 7:#a-code-heading-with-a-link 7:#nowhere"; got != want {
		t.Errorf("links %q, want %q", got, want)
	}
	d := &docs{files: map[string]*mdFile{"docs/x.md": f}}
	if why := d.checkLink(f, "#nowhere"); why == "" {
		t.Error("#nowhere passed")
	}
	if why := d.checkLink(f, "#top-1"); why != "" {
		t.Errorf("#top-1: %s", why)
	}
	if why := d.checkLink(f, "no-such-file.md"); why == "" {
		t.Error("a missing file passed")
	}
	var named []string
	for _, c := range f.code {
		named = append(named, makeTargets(c.text)...)
	}
	if got, want := strings.Join(named, " "), "test-unit test-faults bench lint"; got != want {
		t.Errorf("make targets %q, want %q", got, want)
	}
}
