module github.com/example/gamesession-controller/hack/tools/dashshot

go 1.26.0
