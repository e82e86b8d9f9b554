// An idle LMAX Disruptor (4.0.0): one consumer, one event published at start,
// then nothing. With YieldingWaitStrategy the consumer thread, finding the
// ring empty, calls Thread.yield() -- the sched_yield syscall -- in a tight
// loop, as a latency-tuned Java service does when there is no traffic.
//   java -cp <disruptor.jar>:<dir> Spin SECONDS [yielding|blocking|sleeping]
// Prints "ready pid=<pid>" once the consumer is waiting on the empty ring,
// runs SECONDS (a float), halts the disruptor, joins the consumer, prints
// "done" and exits 0. blocking (a lock and condition: parks, no yield) and
// sleeping (100 spins, 100 yields, then parkNanos) are there to compare.
import com.lmax.disruptor.BlockingWaitStrategy;
import com.lmax.disruptor.EventHandler;
import com.lmax.disruptor.SleepingWaitStrategy;
import com.lmax.disruptor.WaitStrategy;
import com.lmax.disruptor.YieldingWaitStrategy;
import com.lmax.disruptor.dsl.Disruptor;
import com.lmax.disruptor.dsl.ProducerType;
import java.util.concurrent.CountDownLatch;

public class Spin {
    static final class Event { long value; }

    public static void main(String[] args) throws Exception {
        long millis = Math.round(Double.parseDouble(args[0]) * 1000);
        String name = args.length > 1 ? args[1] : "yielding";
        WaitStrategy wait = switch (name) {
            case "yielding" -> new YieldingWaitStrategy();
            case "blocking" -> new BlockingWaitStrategy();
            case "sleeping" -> new SleepingWaitStrategy();
            default -> throw new IllegalArgumentException("wait strategy: " + name);
        };

        // Our own thread factory: a recognisable thread name (the JVM sets it
        // as the thread's comm, "disruptor-consu" after the 15-char cut), and
        // a handle on the consumer thread so we can join it after halt().
        Thread[] consumer = new Thread[1];
        Disruptor<Event> disruptor = new Disruptor<>(Event::new, 1024, r -> {
            consumer[0] = new Thread(r, "disruptor-consumer");
            return consumer[0];
        }, ProducerType.SINGLE, wait);

        // One event at start: once the handler has seen it, the consumer is
        // running and has gone back to waitFor() on the now-empty ring.
        CountDownLatch seen = new CountDownLatch(1);
        EventHandler<Event> handler = (event, sequence, endOfBatch) -> seen.countDown();
        disruptor.handleEventsWith(handler);
        disruptor.start();
        disruptor.publishEvent((event, sequence) -> event.value = sequence);
        seen.await();

        System.out.println("ready pid=" + ProcessHandle.current().pid());
        System.out.flush();
        Thread.sleep(millis);

        // halt() alerts the consumer's barrier (and wakes it if blocked); the
        // wait loop sees the alert and the thread returns. shutdown() would
        // instead wait for a drained ring, which it already is, then halt.
        disruptor.halt();
        consumer[0].join();
        System.out.println("done");
    }
}
