// Reads the wall clock in a loop, as a Java service stamping requests does:
// System.currentTimeMillis() for 10 ms, then a 10 ms sleep (and one
// System.nanoTime()), over and over until STOP_FILE exists or SECONDS have
// passed. Prints pid=<pid> first, then the milliseconds from the process's
// start to the first read (from /proc: its start time, in clock ticks of
// 10 ms, and the uptime), and at the end how many times it called each.
//   java WallClock SECONDS [STOP_FILE]
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;

public class WallClock {
    static final long READ_MS = 10, SLEEP_MS = 10;

    public static void main(String[] args) throws Exception {
        long first = System.currentTimeMillis();
        double uptime = Double.parseDouble(Files.readString(Path.of("/proc/uptime")).split(" ")[0]);
        String stat = Files.readString(Path.of("/proc/self/stat"));
        // field 22 (starttime), counted after the parenthesized comm
        long startTicks = Long.parseLong(stat.substring(stat.lastIndexOf(')') + 2).split(" ")[19]);
        System.out.println("pid=" + ProcessHandle.current().pid());
        System.out.println("startup_ms=" + Math.round(uptime * 1000 - startTicks * 10));
        System.out.flush();
        long end = first + Long.parseLong(args[0]) * 1000;
        File stop = args.length > 1 ? new File(args[1]) : null;
        long millisReads = 1, nanoReads = 0, sink = 0;
        for (;;) {
            long now = System.currentTimeMillis();
            millisReads++;
            if (now >= end || (stop != null && stop.exists())) break;
            long until = now + READ_MS;
            while (now < until) {
                now = System.currentTimeMillis();
                millisReads++;
            }
            sink += System.nanoTime();
            nanoReads++;
            Thread.sleep(SLEEP_MS);
        }
        System.out.println("millis_reads=" + millisReads + " nano_reads=" + nanoReads + " sink=" + (sink & 1));
    }
}
