// islet: Islet's admin command line (docs/cli.md). Each subcommand is a thin shell around a function
// that tests call directly; the commands only parse arguments and print.
import ArgumentParser
import Foundation
import IsletKafka

@main
struct Islet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet",
        abstract: "Islet's admin tool: publish events, register test tokens, tail topics, look at activities.",
        discussion: "Every command is described, with examples, in docs/cli.md.",
        subcommands: [PublishEvent.self, RegisterToken.self, Tail.self, ActivityCommand.self, StaleCommand.self])
}
