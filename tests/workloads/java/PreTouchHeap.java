// SPDX-License-Identifier: MIT
/*
 * PreTouchHeap: a JVM that does nothing but start. Run with
 * -XX:+UseTransparentHugePages -XX:+AlwaysPreTouch -Xms512m -Xmx512m, the
 * JVM touches its whole heap before main runs: with transparent huge pages
 * that is one huge-page fault per 2 MiB of heap.
 *
 *   java PreTouchHeap [SECONDS]
 *
 * Prints "pid=<pid>" (flushed) once main runs, then sleeps SECONDS (default
 * 5) and exits.
 */
public class PreTouchHeap {
    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 5;
        System.out.println("pid=" + ProcessHandle.current().pid());
        System.out.flush();
        Thread.sleep(seconds * 1000);
    }
}
