package awstest

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Config returns an aws.Config for the local servers: static credentials
// test/test, region us-east-1, no shared config or credentials files read.
// If endpoint is not empty it is also set as cfg.BaseEndpoint, and wins
// over AWS_ENDPOINT_URL_<SERVICE> in the environment; callers that
// build clients for more than one service should still set BaseEndpoint per
// client, for example:
//
//	dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
//
// The HTTP client is the SDK's buildable client: AWS_CA_BUNDLE is honoured
// (a plain &http.Client{} makes LoadDefaultConfig panic when it is set).
func Config(t testing.TB, endpoint string) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(t.Context(),
		config.WithRegion(testenv.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(testenv.AccessKeyID, testenv.SecretAccessKey, "")),
		config.WithSharedConfigFiles([]string{}),
		config.WithSharedCredentialsFiles([]string{}),
		config.WithHTTPClient(awshttp.NewBuildableClient()),
	)
	if err != nil {
		t.Fatalf("awstest: load AWS config: %v", err)
	}
	if endpoint != "" {
		cfg.BaseEndpoint = aws.String(endpoint)
		// The SDK prefers AWS_ENDPOINT_URL_<SERVICE> to cfg.BaseEndpoint, and
		// the servers' env file sets those: the endpoint a test names (a
		// second region, a fault proxy) must still be the one it reaches.
		cfg.ConfigSources = append([]any{ignoreConfiguredEndpoints{}}, cfg.ConfigSources...)
	}
	return cfg
}

// ignoreConfiguredEndpoints is a configuration source that turns off the
// endpoints configured by environment or shared config
// (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS).
type ignoreConfiguredEndpoints struct{}

func (ignoreConfiguredEndpoints) GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error) {
	return true, true, nil
}

// NoCredentialsConfig is Config with the credentials a machine without
// any gets: the SDK's default chain, past the environment and the shared
// files, ends at the EC2 instance metadata service, here switched off so
// that it fails at once instead of timing out.
func NoCredentialsConfig(t testing.TB, endpoint string) aws.Config {
	t.Helper()
	cfg := Config(t, endpoint)
	md := imds.New(imds.Options{ClientEnableState: imds.ClientDisabled})
	cfg.Credentials = aws.NewCredentialsCache(ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = md }))
	return cfg
}
