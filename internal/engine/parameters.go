package engine

import (
	"fmt"
	"strings"
)

// settingName guards a name that goes into a statement unquoted: it must
// look like a setting's name (the tables' are all like this).
func settingName(name string) error {
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r == '_' || i > 0 && (r >= '0' && r <= '9' || r == '.')) {
			return fmt.Errorf("%q is not a setting's name", name)
		}
	}
	if name == "" {
		return fmt.Errorf("empty setting name")
	}
	return nil
}

// postgresListParameters take a list: ALTER SYSTEM must get each element
// as its own literal (one literal with commas would be one element).
var postgresListParameters = map[string]bool{
	"search_path": true, "temp_tablespaces": true, "local_preload_libraries": true, "session_preload_libraries": true,
}

// sameSetting compares a value as written with one read back, ignoring
// the spaces after a list's commas.
func sameSetting(a, b string) bool {
	strip := func(s string) string { return strings.ReplaceAll(s, ", ", ",") }
	return strip(a) == strip(b)
}

// mysqlSettingValue writes a value for SET GLOBAL: numbers as numbers
// (with an option file's K, M and G suffixes worked out, which SET GLOBAL
// does not take), anything else as a string literal.
func mysqlSettingValue(v string) string {
	if v == "" {
		return "''"
	}
	digits := strings.TrimLeft(v, "0123456789")
	if whole := len(v) - len(digits); whole > 0 && strings.HasPrefix(digits, ".") && strings.Trim(digits[1:], "0123456789") == "" && len(digits) > 1 {
		return v // a decimal: long_query_time = 2.5
	}
	switch {
	case digits == "":
		return v
	case len(digits) == 1 && len(digits) < len(v) && strings.ContainsAny(digits, "KkMmGg"):
		n := v[:len(v)-1]
		shift := map[byte]string{'k': "10", 'm': "20", 'g': "30"}[strings.ToLower(digits)[0]]
		return "(" + n + " << " + shift + ")"
	}
	return mysqlLiteral(v)
}
