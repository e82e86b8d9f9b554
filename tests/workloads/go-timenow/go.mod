module slowpath/go-timenow

go 1.21
