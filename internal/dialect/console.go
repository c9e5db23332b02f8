package dialect

// InboxLookup returns the query of the web console's inbox lookup: the
// keys of one message ID in table, with every consumer that holds one,
// by consumer and source. Arguments: message_id, consumer (empty for
// every consumer) twice, limit.
func InboxLookup(table string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	return "SELECT consumer, source, message_id, message_type, received_at, status, duplicates FROM " + table +
		" WHERE message_id = ? AND (? = '' OR consumer = ?) ORDER BY consumer, source LIMIT ?", nil
}
