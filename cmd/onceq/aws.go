package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup/dynamostore"
)

// awsConfig reads the SDK's standard settings only (AWS_REGION,
// AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, shared config...), so the CLI
// points wherever the operator's other AWS tools point.
func awsConfig(ctx context.Context) (aws.Config, error) {
	apiOpts, _ := ctx.Value(apiOptionsKey{}).([]func(*middleware.Stack) error)
	cfg, err := config.LoadDefaultConfig(ctx, config.WithAPIOptions(apiOpts))
	if err != nil {
		return cfg, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return cfg, fmt.Errorf("no AWS region: set AWS_REGION or a profile's region")
	}
	return cfg, nil
}

// apiOptionsKey carries middleware for every AWS client the command makes
// (tests record the calls).
type apiOptionsKey struct{}

func dynamoClient(ctx context.Context) (*ddb.Client, error) {
	cfg, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return ddb.NewFromConfig(cfg), nil
}

func streamsClient(ctx context.Context) (*dynamodbstreams.Client, error) {
	cfg, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return dynamodbstreams.NewFromConfig(cfg), nil
}

func sqsClient(ctx context.Context) (*awssqs.Client, error) {
	cfg, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return awssqs.NewFromConfig(cfg), nil
}

// openStore opens the records table in the chosen layout. It returns an
// error so that a constructor that can fail (dynamostore.New returning one)
// is a one-line change here.
func openStore(client *ddb.Client, table string, tenant bool, opts ...dynamostore.Option) (*dynamostore.Store, error) {
	if tenant {
		// Both two-part layouts map a key alike; this one reads a key
		// given whole, tenant or namespace first, without asking for it.
		// Given first, so that a TenantLayout in opts (with TenantShards)
		// takes its place.
		opts = append([]dynamostore.Option{dynamostore.NamespaceLayout()}, opts...)
	}
	return dynamostore.New(client, append([]dynamostore.Option{dynamostore.WithTable(table)}, opts...)...)
}
