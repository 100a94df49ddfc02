package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// dynamoClient builds a client from the SDK's standard settings only
// (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, shared config...), so
// the CLI points wherever the operator's other AWS tools point.
func dynamoClient(ctx context.Context) (*ddb.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("no AWS region: set AWS_REGION or a profile's region")
	}
	return ddb.NewFromConfig(cfg), nil
}
