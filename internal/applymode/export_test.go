package applymode

// Patched is patched, for the external tests.
var Patched = patched
