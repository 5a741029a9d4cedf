package v1

// Hub marks v1 as the hub of the Database's versions: every other version
// (v1alpha1) converts to and from v1, which is also the version stored.
func (*Database) Hub() {}
