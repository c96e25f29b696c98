// islet-stack-bench: the benchmarks that drive the whole running product as the demo's app and
// backend do (scripts/demo.sh --latency, --memory and --scale start everything and run them;
// scripts/bench-e2e.sh, scripts/bench-memory.sh and scripts/bench-scale-stack.sh run those).
import ArgumentParser

@main
struct StackBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-stack-bench", abstract: "End-to-end latency and memory per activity of the running product.",
        subcommands: [Latency.self, Memory.self, Scale.self])
}
