package servers

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// stand starts a process that servers.sh takes for its server name (its
// command line says what that server's does, and it leads its own
// process group), and records it in run as servers.sh records what it
// starts, on port. The test stops it, by its PID.
func stand(t *testing.T, run, name, cmdline string, port int) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Args[0] = cmdline
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for file, v := range map[string]int{name + ".pid": cmd.Process.Pid, name + ".port": port} {
		if err := os.WriteFile(filepath.Join(run, file), []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The env file points the AWS SDKs' own variables at DynamoDB Local and
// the SQS emulator, beside onceq's, so that loading it is enough for the
// AWS CLI, onceq's CLI and a worker built on the SDK's defaults. No
// server is started: two stand-ins are recorded as running, and stopping
// a server that is not running rewrites the file.
func TestEnvFileSetsAWSEndpoints(t *testing.T) {
	run := t.TempDir()
	stand(t, run, "dynamodb", "java -jar DynamoDBLocal.jar", 41001)
	stand(t, run, "sqs", "node fauxqs", 41002)
	cmd := exec.Command("bash", "../servers.sh", "stop", "kafka")
	cmd.Env = append(os.Environ(), "ONCEQ_RUN_DIR="+run)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("servers.sh stop kafka: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(run, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	for k, want := range map[string]string{
		"ONCEQ_DYNAMODB_ENDPOINT":   "http://127.0.0.1:41001",
		"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:41001",
		"ONCEQ_SQS_ENDPOINT":        "http://127.0.0.1:41002",
		"AWS_ENDPOINT_URL_SQS":      "http://127.0.0.1:41002",
		"AWS_REGION":                "us-east-1",
	} {
		if env[k] != want {
			t.Errorf("%s=%q in the env file, want %q\n%s", k, env[k], want, b)
		}
	}
}
