// islet-demo: plays the README's two scenarios against the running services, the way an iOS app and
// a backend would — the app registers tokens with token-registry and forwards a tap to
// analytics-ingest, the backend publishes domain events on Kafka — and prints what the services
// answer: the pushes as the APNs simulator received them (what the phone would show), the click
// event from the clicks topic, the registry's state after APNs said the token is dead.
// scripts/demo.sh starts everything and runs it.

import ArgumentParser
import Foundation
import IsletDemoKit

@main
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-demo", abstract: "The local demo's app and backend.", subcommands: [Setup.self, MockBroker.self, ServeImages.self, Play.self])
}
