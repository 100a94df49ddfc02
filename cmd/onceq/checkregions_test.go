package main

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// twoRegions stands a second DynamoDB Local in for region us-west-2: the
// commands' clients of that region are sent there. With replicas, the
// first region's DescribeTable lists both regions as the table's replicas,
// as DynamoDB does for a Global Table.
func twoRegions(t *testing.T, replicas bool) (context.Context, *ddb.Client) {
	t.Helper()
	west, err := url.Parse(testenv.DynamoDB2Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	redirect := func(st *middleware.Stack) error {
		return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("onceqSecondRegion",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok && awsmiddleware.GetRegion(ctx) == "us-west-2" {
					req.URL.Scheme, req.URL.Host = west.Scheme, west.Host
				}
				return next.HandleFinalize(ctx, in)
			}), "ResolveEndpointV2", middleware.After)
	}
	globalTable := func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("onceqReplicas",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if d, ok := out.Result.(*ddb.DescribeTableOutput); ok && d.Table != nil && awsmiddleware.GetRegion(ctx) == testenv.Region {
					d.Table.Replicas = []types.ReplicaDescription{{RegionName: aws.String(testenv.Region)}, {RegionName: aws.String("us-west-2")}}
				}
				return out, md, err
			}), middleware.After)
	}
	opts := []func(*middleware.Stack) error{redirect}
	if replicas {
		opts = append(opts, globalTable)
	}
	ctx := context.WithValue(t.Context(), apiOptionsKey{}, opts)
	westClient := ddb.NewFromConfig(awstest.Config(t, west.String()), func(o *ddb.Options) { o.BaseEndpoint = aws.String(west.String()) })
	return ctx, westClient
}

// checkLines runs onceq check with ctx (its AWS middleware) and wants its
// exit code, nothing on stderr, and exactly these lines, each given by
// its start.
func checkLines(t *testing.T, ctx context.Context, code int, args []string, lines ...string) {
	t.Helper()
	var out, errOut strings.Builder
	got := run(ctx, append([]string{"check"}, args...), &out, &errOut)
	outLines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	ok := got == code && len(outLines) == len(lines) && errOut.String() == ""
	for i := 0; ok && i < len(lines); i++ {
		ok = strings.HasPrefix(outLines[i], lines[i])
	}
	if !ok {
		t.Fatalf("onceq check %v: exit %d, stderr %q, stdout:\n%s\nwant exit %d and lines starting\n%s",
			args, got, errOut.String(), out.String(), code, strings.Join(lines, "\n"))
	}
}

// onceq check checks the table in every region of a Global Table (its
// replicas, or -regions): a region without the table fails, naming it,
// where only the configured region used to be checked.
func TestCheckEveryRegionOfGlobalTable(t *testing.T) {
	localAWS(t)
	for _, replicas := range []bool{true, false} {
		ctx, west := twoRegions(t, replicas)
		table := tableName(t)
		if code, _, errOut := onceq("create-table", "-table", table); code != 0 {
			t.Fatalf("create-table: exit %d: %s", code, errOut)
		}
		args := []string{"-table", table}
		if !replicas {
			args = append(args, "-regions", testenv.Region+",us-west-2")
		}
		checkLines(t, ctx, 1, args,
			"ok   table "+table+" (region us-east-1): exists, key layout, readable",
			"FAIL table "+table+" (region us-west-2): does not exist")
		if err := dynamostore.CreateTable(t.Context(), west, table); err != nil {
			t.Fatal(err)
		}
		checkLines(t, ctx, 0, args,
			"ok   table "+table+" (region us-east-1): exists, key layout, readable",
			"ok   table "+table+" (region us-west-2): exists, key layout, readable")
	}
}
