// Package awstest gives tests an aws.Config for the local DynamoDB and SQS
// servers whose endpoints package testenv reads, one that finds no
// credentials, and an IAMRecorder that lists the IAM actions a test's AWS
// calls need. A module of its own, so that the library's module, whose
// tests use testenv, requires no AWS SDK.
//
// Only tests and test-support packages import it.
package awstest
