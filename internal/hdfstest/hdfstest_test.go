package hdfstest

import (
	"strings"
	"testing"
)

func TestStartUploadStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	c := Start(t, Datanodes(2), IPHostnames(), BlockSize(64<<10))
	if len(c.Datanodes) != 2 || c.Hostnames[0] != "127.0.0.1" || c.BlockSize != 64<<10 {
		t.Fatalf("cluster %+v", c)
	}
	data := []byte(strings.Repeat("0123456789\n", 20000)) // 220 KB: 4 blocks
	c.WriteFile(t, "/x/y.txt", data)
	got, err := c.Client(t, "").ReadFile("/x/y.txt")
	if err != nil || string(got) != string(data) {
		t.Fatalf("read back %d bytes, err %v", len(got), err)
	}
	if u := c.URL("/x/y.txt"); u != "hdfs://"+c.Namenode+"/x/y.txt" {
		t.Errorf("URL = %s", u)
	}
	c.Stop()
	if _, ok := c.proc.exited(); !ok {
		t.Error("JVM still running after Stop")
	}
}
