import Foundation
import IsletMessages
import IsletRuntime

/// apns-dispatcher's own settings (besides ``ServiceSettings``), from the environment.
/// docs/apns-dispatcher.md lists them.
public struct DispatcherSettings: Sendable {
    /// `ISLET_APNS_KEYS`: `TEAMID=KEYID:/path/to/AuthKey.p8,…` — one signing key per team.
    public var keys: [APNsSigningKey]
    /// `ISLET_APNS_APPS`: `bundle.id=TEAMID,…` — which team signs for each app.
    public var teams: [String: String]
    public var client: APNsClient.Configuration
    public var policy: DispatcherPolicy
    /// `ISLET_DISPATCHER_DEDUPE_WINDOW_MS` (1 h): outcomes this recent are read on assignment.
    public var dedupeWindow: Duration
    /// `ISLET_CHANNEL_SWEEP_INTERVAL_SECONDS` (3600; 0: no sweep): how often the apps' broadcast
    /// channels at APNs are listed, and those no record owns deleted (``ChannelSweeper``).
    public var channelSweepInterval: Duration = .seconds(3_600)
    /// `ISLET_CHANNEL_SWEEP_ENVIRONMENTS` (`production`): the environments whose channels are
    /// swept, comma-separated (`production,sandbox`). When one host serves both (a simulator), a
    /// channel recorded in either is owned in both (``ChannelSweeper/sharedHost``).
    public var channelSweepEnvironments: [APNsEnvironment] = [.production]
    /// `ISLET_CHANNEL_SWEEP_DELETE` (`false`): whether the sweep deletes the channels no record
    /// owns, or only counts and logs them (another deployment of the same app makes channels this
    /// one's records never name).
    public var channelSweepDeletes = false
    /// `ISLET_DISPATCHER_BUDGETS_INTERVAL_MS` (5 s, at least 100 ms): how often the budgets that
    /// changed are written to `islet.dispatch-budgets.v1`.
    public var budgetsInterval: Duration

    public init(
        keys: [APNsSigningKey], teams: [String: String], client: APNsClient.Configuration, policy: DispatcherPolicy,
        dedupeWindow: Duration = .seconds(3_600), budgetsInterval: Duration = .seconds(5)
    ) {
        self.keys = keys
        self.teams = teams
        self.client = client
        self.policy = policy
        self.dedupeWindow = dedupeWindow
        self.budgetsInterval = budgetsInterval
    }

    public init(from config: IsletConfig) throws {
        let keys = try Self.signingKeys(config)
        let teams = try Self.teams(config, keys: keys)
        let (client, policy) = (try Self.client(config), try Self.policy(config))
        // Before anything connects: a CA bundle without APNs's current root fails every push.
        try APNsTrustCheck.check(client)
        let budgetsInterval = try config.milliseconds("islet.dispatcher.budgets.interval.ms", default: .seconds(5))
        guard budgetsInterval >= .milliseconds(100) else {
            throw ConfigurationError(key: "islet.dispatcher.budgets.interval.ms", problem: "must be at least 100")
        }
        self.init(
            keys: keys, teams: teams, client: client, policy: policy,
            dedupeWindow: try config.milliseconds("islet.dispatcher.dedupe.window.ms", default: .seconds(3_600)), budgetsInterval: budgetsInterval)
        channelSweepInterval = .seconds(try config.int("islet.channel.sweep.interval.seconds", default: 3_600, range: 0...86_400))
        if channelSweepInterval > .zero, channelSweepInterval < ChannelSweeper.minimumInterval {
            throw ConfigurationError(key: "islet.channel.sweep.interval.seconds", problem: "is 0 (no sweep) or at least 60")
        }
        channelSweepDeletes = try config.bool("islet.channel.sweep.delete", default: false)
        let environments = try config.string("islet.channel.sweep.environments", default: "production")
        channelSweepEnvironments = try environments.split(separator: ",").map { name throws(ConfigurationError) -> APNsEnvironment in
            let environment = APNsEnvironment(rawValue: name.trimmingCharacters(in: .whitespaces))
            guard environment.isKnown else {
                throw ConfigurationError(key: "islet.channel.sweep.environments", problem: "expects production and/or sandbox, got \(name)")
            }
            return environment
        }
    }

    /// `ISLET_APNS_KEYS`: one signing key per team, read from its .p8 file; and
    /// `ISLET_APNS_SCOPED_KEYS`: keys limited to an environment and/or a list of apps (APNs,
    /// February 2025), `KEYID=TEAMID:/path/to/AuthKey.p8:ENVIRONMENT:TOPICS,…` with ENVIRONMENT
    /// `production`, `sandbox` or `*` (both) and TOPICS `*` (every app of the team) or bundle ids
    /// joined by `+`.
    static func signingKeys(_ config: IsletConfig) throws -> [APNsSigningKey] {
        var keys = try teamKeys(config)
        for (keyID, value) in try config.properties("islet.apns.scoped.keys").sorted(by: { $0.key < $1.key }) {
            let parts = value.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 4, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ConfigurationError(
                    key: "islet.apns.scoped.keys", problem: "expects KEYID=TEAMID:/path/to/AuthKey.p8:ENVIRONMENT:TOPICS, got \(keyID)=…")
            }
            let environment: APNsEnvironment?
            switch parts[2] {
            case "*": environment = nil
            case let name where APNsEnvironment(rawValue: name).isKnown: environment = APNsEnvironment(rawValue: name)
            default: throw ConfigurationError(key: "islet.apns.scoped.keys", problem: "key \(keyID): the environment is production, sandbox or *, got \(parts[2])")
            }
            let topics: Set<String>? = parts[3] == "*" ? nil : Set(parts[3].split(separator: "+").map(String.init))
            if let topics, topics.isEmpty || topics.contains(where: { $0.isEmpty }) {
                throw ConfigurationError(key: "islet.apns.scoped.keys", problem: "key \(keyID): the topics are * or bundle ids joined by +, got \(parts[3])")
            }
            guard !keys.contains(where: { $0.keyID == keyID }) else {
                throw ConfigurationError(key: "islet.apns.scoped.keys", problem: "key \(keyID) is named twice")
            }
            keys.append(try readKey(keyID: keyID, teamID: parts[0], path: parts[1], scope: .init(environment: environment, topics: topics), setting: "islet.apns.scoped.keys"))
        }
        guard !keys.isEmpty else {
            throw ConfigurationError(key: "islet.apns.keys", problem: "must name at least one signing key (or ISLET_APNS_SCOPED_KEYS)")
        }
        return keys
    }

    static func readKey(keyID: String, teamID: String, path: String, scope: APNsSigningKey.Scope, setting: String) throws -> APNsSigningKey {
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError(key: setting, problem: "cannot read the signing key \(keyID) of team \(teamID) from \(path)")
        }
        do {
            return try APNsSigningKey(keyID: keyID, teamID: teamID, pem: pem, scope: scope)
        } catch {
            throw ConfigurationError(key: setting, problem: "\(path) is not a P-256 private key in PEM (a .p8 file)")
        }
    }

    static func teamKeys(_ config: IsletConfig) throws -> [APNsSigningKey] {
        let keys = try teamKeysByTeam(config)
        // A key id names one key: two teams' keys under one id would sign with the wrong `iss`.
        if let twice = Dictionary(grouping: keys, by: \.keyID).first(where: { $0.value.count > 1 })?.key {
            throw ConfigurationError(key: "islet.apns.keys", problem: "key id \(twice) is given to two teams")
        }
        return keys
    }

    private static func teamKeysByTeam(_ config: IsletConfig) throws -> [APNsSigningKey] {
        var keys: [APNsSigningKey] = []
        for (team, value) in try config.properties("islet.apns.keys").sorted(by: { $0.key < $1.key }) {
            let parts = value.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2 else {
                throw ConfigurationError(key: "islet.apns.keys", problem: "expects TEAMID=KEYID:/path/to/AuthKey.p8, got \(team)=…")
            }
            keys.append(try readKey(keyID: parts[0], teamID: team, path: parts[1], scope: .team, setting: "islet.apns.keys"))
        }
        return keys
    }

    /// `ISLET_APNS_APPS`: the team of each app, which must have a key that covers it in at least
    /// one environment (start-up is refused otherwise).
    static func teams(_ config: IsletConfig, keys: [APNsSigningKey]) throws -> [String: String] {
        let teams = try config.properties("islet.apns.apps")
        // A lane is named by a key id or a team id: one name must not be both.
        let teamIDs = Set(teams.values).union(keys.map(\.teamID))
        if let both = keys.first(where: { teamIDs.contains($0.keyID) }) {
            throw ConfigurationError(key: "islet.apns.keys", problem: "key id \(both.keyID) is also a team id: give the key its own id, as Apple does")
        }
        guard !teams.isEmpty else { throw ConfigurationError(key: "islet.apns.apps", problem: "must map at least one bundle id to its team") }
        for (bundle, team) in teams.sorted(by: { $0.key < $1.key }) {
            guard keys.contains(where: { $0.teamID == team }) else {
                throw ConfigurationError(key: "islet.apns.apps", problem: "\(bundle) is signed by team \(team), which has no key in ISLET_APNS_KEYS or ISLET_APNS_SCOPED_KEYS")
            }
            guard [APNsEnvironment.production, .sandbox].contains(where: { APNsSigningKey.choose(from: keys, teamID: team, bundleID: bundle, environment: $0) != nil })
            else {
                throw ConfigurationError(key: "islet.apns.apps", problem: "no key of team \(team) covers \(bundle) (ISLET_APNS_SCOPED_KEYS limits each key to its topics)")
            }
        }
        return teams
    }

    /// With scoped keys, the key id that signs for each app in each environment (empty with one
    /// key per team: the lanes are the teams').
    public var signers: [AppTarget: String] {
        guard keys.contains(where: { $0.scope != .team }) || Dictionary(grouping: keys, by: \.teamID).values.contains(where: { $0.count > 1 }) else {
            return [:]
        }
        var signers: [AppTarget: String] = [:]
        for (bundle, team) in teams {
            for environment in [APNsEnvironment.production, .sandbox] {
                if let key = APNsSigningKey.choose(from: keys, teamID: team, bundleID: bundle, environment: environment) {
                    signers[AppTarget(bundleId: bundle, environment: environment)] = key.keyID
                }
            }
        }
        return signers
    }

    /// The apps no key covers in one of the environments: their requests there are `rejected`
    /// at once, naming the missing key.
    public var uncovered: Set<AppTarget> {
        var apps: Set<AppTarget> = []
        for (bundle, team) in teams {
            for environment in [APNsEnvironment.production, .sandbox]
            where APNsSigningKey.choose(from: keys, teamID: team, bundleID: bundle, environment: environment) == nil {
                apps.insert(AppTarget(bundleId: bundle, environment: environment))
            }
        }
        return apps
    }

    /// Where APNs is (`ISLET_APNS_*_URL`), the trust roots, connections and timeouts.
    static func client(_ config: IsletConfig) throws -> APNsClient.Configuration {
        var client = APNsClient.Configuration()
        if let url = config.optionalString("islet.apns.url") { client.useEverywhere(try Self.endpoint(url, key: "islet.apns.url")) }
        if let url = config.optionalString("islet.apns.production.url") { client.production = try Self.endpoint(url, key: "islet.apns.production.url") }
        if let url = config.optionalString("islet.apns.sandbox.url") { client.sandbox = try Self.endpoint(url, key: "islet.apns.sandbox.url") }
        if let url = config.optionalString("islet.apns.broadcast.production.url") {
            client.broadcastProduction = try Self.endpoint(url, key: "islet.apns.broadcast.production.url")
        }
        if let url = config.optionalString("islet.apns.broadcast.sandbox.url") {
            client.broadcastSandbox = try Self.endpoint(url, key: "islet.apns.broadcast.sandbox.url")
        }
        if let url = config.optionalString("islet.apns.channels.production.url") {
            client.channelsProduction = try Self.endpoint(url, key: "islet.apns.channels.production.url")
        }
        if let url = config.optionalString("islet.apns.channels.sandbox.url") {
            client.channelsSandbox = try Self.endpoint(url, key: "islet.apns.channels.sandbox.url")
        }
        if let path = config.optionalString("islet.apns.ca.file") {
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(key: "islet.apns.ca.file", problem: "cannot read \(path)")
            }
            client.trustedCertificatesPEM = pem
        }
        client.connectionsPerLane = try config.int("islet.apns.connections", default: 2, range: 1...64)
        client.requestTimeout = try config.milliseconds("islet.apns.request.timeout.ms", default: .seconds(10))

        return client
    }

    /// Budgets, retries and the send window (`ISLET_BUDGET_*`, `ISLET_RETRY_*`, `ISLET_DISPATCHER_*`).
    static func policy(_ config: IsletConfig) throws -> DispatcherPolicy {
        var policy = DispatcherPolicy()
        policy.budgets.standard.capacity = try config.int("islet.budget.standard.per.hour", default: 12, range: 1...100_000)
        policy.budgets.frequent.capacity = try config.int("islet.budget.frequent.per.hour", default: 240, range: 1...100_000)
        for (bundle, value) in try config.properties("islet.budget.apps") {
            let parts = value.split(separator: "/").compactMap { Int($0) }
            guard parts.count == 2, parts.allSatisfy({ $0 > 0 }) else {
                throw ConfigurationError(key: "islet.budget.apps", problem: "expects bundle.id=STANDARD/FREQUENT (per hour), got \(bundle)=\(value)")
            }
            policy.budgets.apps[bundle] = (.init(capacity: parts[0], period: .seconds(3_600)), .init(capacity: parts[1], period: .seconds(3_600)))
        }
        policy.budgets.pushToStart.capacity = try config.int("islet.budget.push.to.start.burst", default: 8, range: 1...1_000)
        policy.budgets.widgets.capacity = try config.int("islet.budget.widgets.per.hour", default: 6, range: 1...1_000)
        policy.budgets.criticalMaximumWait = try config.milliseconds("islet.budget.critical.max.wait.ms", default: .seconds(120))
        policy.retry.maximumAttempts = try config.int("islet.retry.max.attempts", default: 8, range: 1...100)
        policy.retry.maximumDelay = try config.milliseconds("islet.retry.max.delay.ms", default: .seconds(30))
        policy.retry.maximumDuration = try config.milliseconds("islet.retry.max.duration.ms", default: .seconds(300))
        policy.retry.tokenBackoff = try config.milliseconds("islet.retry.token.backoff.ms", default: .seconds(30))
        policy.maximumInFlight = try config.int("islet.dispatcher.max.in.flight", default: 1_024, range: 1...100_000)
        policy.initialInFlight = try config.int("islet.dispatcher.initial.in.flight", default: 32, range: 1...100_000)
        policy.slowAnswer = try config.milliseconds("islet.dispatcher.slow.answer.ms", default: .seconds(2))
        policy.tokenWait = try config.milliseconds("islet.dispatcher.token.wait.ms", default: .seconds(120))
        policy.channelDeletionDelay = try config.milliseconds("islet.dispatcher.channel.deletion.delay.ms", default: .seconds(4 * 3_600))
        return policy
    }

    static func endpoint(_ text: String, key: String) throws(ConfigurationError) -> APNsClient.Endpoint {
        guard let url = URL(string: text), url.scheme == "https", let host = url.host, !host.isEmpty else {
            throw ConfigurationError(key: key, problem: "must be an https URL like https://api.push.apple.com:443, got \(text)")
        }
        return APNsClient.Endpoint(host: host, port: url.port ?? 443)
    }
}
