// Package plainbody works around a race between smithy-go and net/http
// that every AWS SDK client meets, whatever the service.
//
// smithy-go wraps a request's body (a bytes.Reader for the JSON protocols
// of SQS and DynamoDB) in a reader that keeps its WriteTo, and closes it as
// soon as the response headers arrive. net/http, after writing
// Content-Length bytes, drains the body (io.Copy to io.Discard, which uses
// WriteTo when there is one); a closed body's WriteTo returns io.EOF, which
// net/http takes for a write failure, and it closes the connection under
// the response being read. The call fails though the server answered: seen
// about once per 5,000 SQS receives (more under -race), where it loses the
// received messages until their visibility runs out; a DynamoDB call meets
// the same race on the same code path. Without WriteTo, io.Copy reads, and
// a Read's io.EOF is a clean end.
//
// It imports nothing of onceq's; the packages that own an AWS client
// import it.
package plainbody
