package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// splitTimestamp splits a log line the API server gave with
// timestamps=true into its time (RFC 3339, the container runtime's) and
// its text; ok is false when the line has none.
func splitTimestamp(line string) (ts time.Time, text string, ok bool) {
	stamp, rest, _ := strings.Cut(line, " ")
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, line, false
	}
	return ts, rest, true
}

// The keys of a JSON log line formatLine reads: PostgreSQL's jsonlog
// (timestamp, error_severity, message, detail, hint, context, statement)
// first, then the usual ones of structured loggers.
var (
	logTimeKeys     = []string{"timestamp", "time", "ts", "@timestamp"}
	logSeverityKeys = []string{"error_severity", "level", "severity", "lvl"}
	logMessageKeys  = []string{"message", "msg"}
	logDetailKeys   = []string{"detail", "hint", "context", "statement", "error", "err"}
)

// formatLine is a log line for a person: a JSON object as
// "TIME SEVERITY message (detail: ...; hint: ...)" on one line, its other
// keys left out (PostgreSQL's pid, session_id, ...); one without a message
// as its keys "key=value" in order; any other line unchanged.
func formatLine(line string) string {
	fields, ok := jsonObject(line)
	if !ok || len(fields) == 0 {
		return line
	}
	var parts []string
	for _, keys := range [][]string{logTimeKeys, logSeverityKeys} {
		if v, ok := take(fields, keys); ok {
			parts = append(parts, v)
		}
	}
	msg, ok := take(fields, logMessageKeys)
	if !ok {
		return strings.Join(append(parts, keyValues(fields)...), " ")
	}
	parts = append(parts, msg)
	var details []string
	for _, k := range logDetailKeys {
		if v, ok := take(fields, []string{k}); ok {
			details = append(details, k+": "+v)
		}
	}
	if len(details) > 0 {
		parts = append(parts, "("+strings.Join(details, "; ")+")")
	}
	return strings.Join(parts, " ")
}

// jsonObject is line decoded, when it is one JSON object and nothing else.
func jsonObject(line string) (map[string]any, bool) {
	trimmed := strings.TrimSpace(line)
	if !strings.HasPrefix(trimmed, "{") {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.UseNumber()
	var fields map[string]any
	if dec.Decode(&fields) != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return fields, true
}

// take removes the first of keys fields has with a value that is not
// empty, and returns that value as text.
func take(fields map[string]any, keys []string) (string, bool) {
	for _, k := range keys {
		v, ok := fields[k]
		if !ok {
			continue
		}
		delete(fields, k)
		if s := logValue(v); s != "" {
			return s, true
		}
	}
	return "", false
}

// logValue is v on one line: a string as it is (its line breaks as \n),
// anything else as compact JSON.
func logValue(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return strings.NewReplacer("\r\n", `\n`, "\n", `\n`, "\r", `\r`).Replace(v)
	case json.Number:
		return v.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// keyValues are fields as key=value, by key, a string quoted when it is
// empty or has spaces or quotes, anything else as compact JSON.
func keyValues(fields map[string]any) []string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		v := logValue(fields[k])
		switch fields[k].(type) {
		case nil:
			v = "null"
		case string:
			if v == "" || strings.ContainsAny(v, " \t\"=") {
				v = strconv.Quote(v)
			}
		}
		out = append(out, k+"="+v)
	}
	return out
}

// logPrinter writes the lines of several pods to one writer, one line at
// a time, each after its pod's name in a column of width.
type logPrinter struct {
	mu          sync.Mutex
	out, errOut io.Writer
	width       int
	// color puts each pod's name in a colour of its own (a terminal).
	color  bool
	colors map[string]string
}

// podColors are ANSI colours for pod names: cyan, yellow, magenta, green,
// blue, red.
var podColors = []string{"36", "33", "35", "32", "34", "31"}

func newLogPrinter(out, errOut io.Writer, pods []string) *logPrinter {
	p := &logPrinter{out: out, errOut: errOut, color: colorTerminal(out), colors: map[string]string{}}
	for i, name := range pods {
		p.width = max(p.width, len(name))
		p.colors[name] = podColors[i%len(podColors)]
	}
	return p
}

// colorTerminal says w is a terminal that takes colours: a character
// device, and NO_COLOR (no-color.org) not set.
func colorTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// line writes text of pod, formatted.
func (p *logPrinter) line(pod, text string) {
	name := fmt.Sprintf("%-*s", p.width, pod)
	if p.color {
		name = "\x1b[" + p.colors[pod] + "m" + name + "\x1b[0m"
	}
	var b bytes.Buffer
	b.WriteString(name)
	b.WriteString(" | ")
	b.WriteString(formatLine(text))
	b.WriteByte('\n')
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.out.Write(b.Bytes())
}

// failed tells on the error stream that pod's log could not be read.
func (p *logPrinter) failed(pod string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.errOut, "%s: reading its log: %v\n", pod, err)
}
