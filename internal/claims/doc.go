// Package claims serves the operator of the inbox's external-effects mode
// (inbox.External), through the postroom command and the console: it
// lists the claims whose outcome is unknown ([ListUnresolved]) and records
// what the operator found out ([Resolve], [ResolveAttempt]).
package claims
