package flexps;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * MiniHDFS starts an in-process HDFS (one namenode, N datanodes) for flexps
 * integration tests, writes a JSON state file once it is ready, and runs until
 * it is killed (or, with --exit-on-stdin-eof, until its stdin closes, so a
 * test process that dies takes the cluster with it).
 *
 * Everything binds to 127.0.0.1. Each datanode registers under a distinct
 * fake hostname (dn0.localhost, dn1.localhost, ...) on a distinct rack
 * (/rack0, ...) so locality can be tested; clients reach datanodes by their
 * IP address (127.0.0.1:xferPort), which is what the namenode reports as
 * ipAddr, so the fake names need no DNS. Use --hostnames=ip to register every
 * datanode as 127.0.0.1 instead.
 */
public final class MiniHDFS {
  private static void usage() {
    System.err.println("usage: MiniHDFS --state FILE [--dir DIR] [--nn-port N] [--http-port N]"
        + " [--datanodes N] [--replication N] [--block-size BYTES] [--hostnames fake|ip]"
        + " [--exit-on-stdin-eof] [--cleanup-dir DIR]");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    String state = null;
    String dir = null;
    int nnPort = 0;
    int httpPort = 0;
    int datanodes = 3;
    int replication = -1;
    long blockSize = 1 << 20;
    String hostnames = "fake";
    boolean exitOnEOF = false;
    String cleanupDir = null;
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      String v = null;
      if (a.startsWith("--") && a.contains("=")) {
        v = a.substring(a.indexOf('=') + 1);
        a = a.substring(0, a.indexOf('='));
      }
      if (a.equals("--exit-on-stdin-eof")) {
        exitOnEOF = true;
        continue;
      }
      if (v == null) {
        if (i + 1 >= args.length) {
          usage();
        }
        v = args[++i];
      }
      switch (a) {
        case "--state": state = v; break;
        case "--dir": dir = v; break;
        case "--nn-port": nnPort = Integer.parseInt(v); break;
        case "--http-port": httpPort = Integer.parseInt(v); break;
        case "--datanodes": datanodes = Integer.parseInt(v); break;
        case "--replication": replication = Integer.parseInt(v); break;
        case "--block-size": blockSize = Long.parseLong(v); break;
        case "--hostnames": hostnames = v; break;
        case "--cleanup-dir": cleanupDir = v; break;
        default: usage();
      }
    }
    if (state == null || datanodes < 1 || blockSize < 512 || blockSize % 512 != 0
        || !(hostnames.equals("fake") || hostnames.equals("ip"))) {
      usage();
    }
    if (replication < 1) {
      replication = Math.min(2, datanodes);
    }
    Path statePath = Path.of(state).toAbsolutePath();
    File base = dir != null ? new File(dir) : statePath.getParent().resolve("minihdfs-data").toFile();
    base.mkdirs();

    Configuration conf = new Configuration();
    conf.set("hadoop.tmp.dir", new File(base, "tmp").getAbsolutePath());
    conf.set("dfs.namenode.rpc-address", "127.0.0.1:" + nnPort);
    conf.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort);
    conf.set("dfs.namenode.https-address", "127.0.0.1:0");
    conf.set("dfs.namenode.servicerpc-bind-host", "127.0.0.1");
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.setLong("dfs.blocksize", blockSize);
    conf.setLong("dfs.namenode.fs-limits.min-block-size", 0);
    conf.setInt("dfs.bytes-per-checksum", 512);
    conf.setInt("dfs.replication", replication);
    // The fake datanode names do not resolve outside this JVM: the namenode
    // must not insist, and datanodes talk to each other by IP.
    conf.setBoolean("dfs.namenode.datanode.registration.ip-hostname-check", false);
    conf.setBoolean("dfs.datanode.use.datanode.hostname", false);
    conf.setBoolean("dfs.client.use.datanode.hostname", false);
    // Start fast: no safe-mode grace period, quick heartbeats.
    conf.setInt("dfs.namenode.safemode.extension", 0);
    conf.setLong("dfs.heartbeat.interval", 1);
    conf.setInt("dfs.namenode.heartbeat.recheck-interval", 5000);

    String[] racks = new String[datanodes];
    // Given racks but no hosts, MiniDFSCluster invents hostN.foo.com; name
    // every datanode explicitly.
    String[] hosts = new String[datanodes];
    for (int i = 0; i < datanodes; i++) {
      racks[i] = "/rack" + i;
      hosts[i] = hostnames.equals("fake") ? "dn" + i + ".localhost" : "127.0.0.1";
    }

    long t0 = System.nanoTime();
    MiniDFSCluster.Builder b = new MiniDFSCluster.Builder(conf, base)
        .numDataNodes(datanodes)
        .nameNodePort(nnPort)
        .nameNodeHttpPort(httpPort)
        .racks(racks)
        .format(true)
        .skipFsyncForTesting(true)
        .waitSafeMode(true)
        .hosts(hosts);
    final MiniDFSCluster cluster = b.build();
    cluster.waitActive();
    cluster.waitClusterUp();

    // A world-writable, sticky /tmp (as on a real cluster) so tests running
    // as another user have somewhere to write.
    FileSystem fs = cluster.getFileSystem();
    org.apache.hadoop.fs.Path tmp = new org.apache.hadoop.fs.Path("/tmp");
    fs.mkdirs(tmp);
    fs.setPermission(tmp, new FsPermission((short) 01777));

    InetSocketAddress rpc = cluster.getNameNode().getNameNodeAddress();
    InetSocketAddress http = cluster.getNameNode().getHttpAddress();
    StringBuilder js = new StringBuilder();
    js.append("{\n");
    js.append("  \"namenode\": ").append(q("127.0.0.1:" + rpc.getPort())).append(",\n");
    js.append("  \"http\": ").append(q("127.0.0.1:" + http.getPort())).append(",\n");
    js.append("  \"superuser\": ").append(q(UserGroupInformation.getCurrentUser().getShortUserName())).append(",\n");
    js.append("  \"block_size\": ").append(blockSize).append(",\n");
    js.append("  \"replication\": ").append(replication).append(",\n");
    js.append("  \"pid\": ").append(ProcessHandle.current().pid()).append(",\n");
    js.append("  \"datanodes\": [");
    List<DataNode> dns = new ArrayList<>(cluster.getDataNodes());
    for (int i = 0; i < dns.size(); i++) {
      DataNode dn = dns.get(i);
      js.append(i == 0 ? "\n" : ",\n");
      js.append("    {\"addr\": ").append(q("127.0.0.1:" + dn.getXferPort()))
          .append(", \"hostname\": ").append(q(dn.getDatanodeId().getHostName()))
          .append(", \"rack\": ").append(q(racks[i]))
          .append(", \"http\": ").append(q("127.0.0.1:" + dn.getInfoPort()))
          .append(", \"ipc\": ").append(q("127.0.0.1:" + dn.getIpcPort()))
          .append("}");
    }
    js.append("\n  ]\n}\n");
    Path tmpState = statePath.resolveSibling(statePath.getFileName() + ".tmp");
    Files.writeString(tmpState, js.toString(), StandardCharsets.UTF_8);
    Files.move(tmpState, statePath, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    System.err.printf("MiniHDFS ready in %.1fs: %s%n", (System.nanoTime() - t0) / 1e9, js);

    final CountDownLatch done = new CountDownLatch(1);
    final String removeDir = cleanupDir;
    final AtomicBoolean stopped = new AtomicBoolean();
    final Runnable stop = () -> {
      if (!stopped.compareAndSet(false, true)) {
        return;
      }
      try {
        Files.deleteIfExists(statePath);
        cluster.shutdown(true);
      } catch (Throwable e) {
        System.err.println("MiniHDFS: shutdown: " + e);
      } finally {
        if (removeDir != null) {
          deleteTree(new File(removeDir));
        }
      }
    };
    // SIGTERM/SIGINT: Hadoop's own hooks may already be running, so this is
    // best effort; the stdin path below stops the cluster before exiting.
    Runtime.getRuntime().addShutdownHook(new Thread(stop));
    if (exitOnEOF) {
      Thread t = new Thread(() -> {
        try {
          InputStream in = System.in;
          byte[] buf = new byte[256];
          while (in.read(buf) >= 0) {
            // ignore input; only EOF matters
          }
        } catch (IOException e) {
          // a broken stdin means our parent is gone too
        }
        done.countDown();
      }, "stdin-watch");
      t.setDaemon(true);
      t.start();
    }
    done.await();
    System.err.println("MiniHDFS: stdin closed, shutting down");
    stop.run();
    System.exit(0);
  }

  private static void deleteTree(File f) {
    File[] kids = f.listFiles();
    if (kids != null) {
      for (File k : kids) {
        deleteTree(k);
      }
    }
    f.delete();
  }

  private static String q(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\');
      }
      b.append(c);
    }
    return b.append('"').toString();
  }
}
