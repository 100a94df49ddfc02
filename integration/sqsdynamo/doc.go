// Package sqsdynamo holds the tests that run the SQS source against the
// DynamoDB store. They live here, in a module that may require both, so
// that the SQS source's module does not require the DynamoDB SDK: a user
// of SQS with another store does not inherit it.
package sqsdynamo
