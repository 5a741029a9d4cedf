package v1

import "slices"

// SupportedVersions returns, oldest first, the server versions the operator
// runs for an engine. The CEL rules on DatabaseSpec repeat these lists (CEL
// cannot call Go); a unit test keeps the two in step.
func SupportedVersions(e Engine) []string {
	switch e {
	case EnginePostgreSQL:
		return []string{"15", "16", "17"}
	case EngineMySQL:
		return []string{"8.4"}
	case EngineMariaDB:
		return []string{"10.11", "11.4", "11.8"}
	}
	return nil
}

// DefaultVersion returns the version a Database gets when spec.version is empty.
func DefaultVersion(e Engine) string {
	switch e {
	case EnginePostgreSQL:
		return "17"
	case EngineMySQL:
		return "8.4"
	case EngineMariaDB:
		return "11.4"
	}
	return ""
}

// Engines returns every engine the API accepts.
func Engines() []Engine { return []Engine{EnginePostgreSQL, EngineMySQL, EngineMariaDB} }

// IsSupportedVersion reports whether the engine runs that version.
func IsSupportedVersion(e Engine, version string) bool {
	return slices.Contains(SupportedVersions(e), version)
}
