package bus

// MaxContentionRetries exports maxContentionRetries to the tests of
// package bus_test.
const MaxContentionRetries = maxContentionRetries
